package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds the special tokens that frame an encoded sequence:
// tokenizer.json's "post_processor". It runs only when Encode is asked to
// add special tokens.
type postProcessor interface {
	process(ids []int32) []int32
}

type postSequence []postProcessor

func (q postSequence) process(ids []int32) []int32 {
	for _, p := range q {
		ids = p.process(ids)
	}
	return ids
}

// template is TemplateProcessing's "single" layout: special token ids
// around the sequence (nil entries stand for the sequence itself).
type template struct {
	items [][]int32
}

func (t template) process(ids []int32) []int32 {
	out := make([]int32, 0, len(ids)+4)
	for _, it := range t.items {
		if it == nil {
			out = append(out, ids...)
		} else {
			out = append(out, it...)
		}
	}
	return out
}

type noPost struct{}

func (noPost) process(ids []int32) []int32 { return ids }

type rawPost struct {
	Type       string            `json:"type"`
	Processors []json.RawMessage `json:"processors"`
	Single     []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int32 `json:"ids"`
	} `json:"special_tokens"`
	Cls json.RawMessage `json:"cls"`
	Sep json.RawMessage `json:"sep"`
}

func parsePost(data json.RawMessage, where string) (postProcessor, error) {
	if isNull(data) {
		return nil, nil
	}
	var r rawPost
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	switch r.Type {
	case "Sequence":
		var q postSequence
		for i, d := range r.Processors {
			p, err := parsePost(d, fmt.Sprintf("%s.processors[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if p != nil {
				q = append(q, p)
			}
		}
		return q, nil
	case "ByteLevel":
		return noPost{}, nil
	case "TemplateProcessing":
		var t template
		for i, it := range r.Single {
			switch {
			case it.Sequence != nil:
				t.items = append(t.items, nil)
			case it.SpecialToken != nil:
				st, ok := r.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("%s.single[%d]: special token %q is not in special_tokens", where, i, it.SpecialToken.ID)
				}
				t.items = append(t.items, append([]int32{}, st.IDs...))
			default:
				return nil, fmt.Errorf("%s.single[%d]: neither SpecialToken nor Sequence", where, i)
			}
		}
		return t, nil
	case "BertProcessing", "RobertaProcessing":
		// cls and sep are [token, id] pairs.
		var cls, sep []json.RawMessage
		if json.Unmarshal(r.Cls, &cls) != nil || len(cls) != 2 || json.Unmarshal(r.Sep, &sep) != nil || len(sep) != 2 {
			return nil, fmt.Errorf("%s: cls and sep must be [token, id] pairs", where)
		}
		var c, s int32
		if json.Unmarshal(cls[1], &c) != nil || json.Unmarshal(sep[1], &s) != nil {
			return nil, fmt.Errorf("%s: cls and sep ids must be integers", where)
		}
		return template{items: [][]int32{{c}, nil, {s}}}, nil
	}
	return nil, fmt.Errorf("%s: post-processor type %q is not supported", where, r.Type)
}
