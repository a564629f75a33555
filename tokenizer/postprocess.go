package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
)

// sequence is one encoded text on its way through the post-processor, or a
// part the post-processor made (a special token): ids and the token type
// id of each.
type sequence struct {
	ids, types []int32
}

// postProcessor joins the encoded texts (one, or a pair) into one input,
// adding the special tokens that frame them when addSpecial is set, and
// gives every token its type id: tokenizer.json's "post_processor". Like
// the tokenizers library's, it maps a list of parts to another; the input
// is their concatenation.
type postProcessor interface {
	process(parts []sequence, addSpecial bool) []sequence
}

// postProcess runs the post-processor over the encoded texts, each typed
// by its position (0, then 1) first, and concatenates the parts it gives.
func (t *Tokenizer) postProcess(parts []sequence, addSpecial bool) (ids, types []int32) {
	for i := range parts {
		parts[i].types = repeatType(int32(i), len(parts[i].ids))
	}
	if t.post == nil && len(parts) == 1 {
		return parts[0].ids, parts[0].types
	}
	if t.post != nil {
		// The parts it gives may share the special tokens' ids with the
		// post-processor itself: they are copied below.
		parts = t.post.process(parts, addSpecial)
	}
	n := 0
	for _, p := range parts {
		n += len(p.ids)
	}
	ids, types = make([]int32, 0, n), make([]int32, 0, n)
	for _, p := range parts {
		ids = append(ids, p.ids...)
		types = append(types, p.types...)
	}
	return ids, types
}

func repeatType(typ int32, n int) []int32 {
	out := make([]int32, n)
	if typ != 0 {
		for i := range out {
			out[i] = typ
		}
	}
	return out
}

type postSequence []postProcessor

func (q postSequence) process(parts []sequence, addSpecial bool) []sequence {
	for _, p := range q {
		parts = p.process(parts, addSpecial)
	}
	return parts
}

// templateItem is one piece of a TemplateProcessing layout: a special
// token's ids (seq -1) or sequence seq (0 for A, 1 for B), with the type id
// its tokens get.
type templateItem struct {
	seq    int
	ids    []int32
	typeID int32
}

// template is TemplateProcessing: the single layout for one text, the
// pair layout for two. A sequence takes its item's type id whether or not
// special tokens are added.
type template struct {
	single, pair []templateItem
}

func (t template) process(parts []sequence, addSpecial bool) []sequence {
	var items []templateItem
	switch len(parts) {
	case 1:
		items = t.single
	case 2:
		items = t.pair
	default:
		return parts
	}
	out := make([]sequence, 0, len(items))
	for _, it := range items {
		switch {
		case it.seq >= 0:
			ids := parts[it.seq].ids
			out = append(out, sequence{ids: ids, types: repeatType(it.typeID, len(ids))})
		case addSpecial:
			out = append(out, sequence{ids: it.ids, types: repeatType(it.typeID, len(it.ids))})
		}
	}
	return out
}

// bertPost is BertProcessing: [CLS] A [SEP], then B [SEP] typed 1.
type bertPost struct{ cls, sep int32 }

func (b bertPost) process(parts []sequence, addSpecial bool) []sequence {
	if !addSpecial {
		return parts
	}
	out := make([]sequence, len(parts))
	for i, p := range parts {
		if i == 0 {
			out[i] = sequence{
				ids:   append(append([]int32{b.cls}, p.ids...), b.sep),
				types: append(append([]int32{0}, p.types...), 0),
			}
		} else {
			out[i] = sequence{
				ids:   append(append([]int32(nil), p.ids...), b.sep),
				types: append(append([]int32(nil), p.types...), 1),
			}
		}
	}
	return out
}

// robertaPost is RobertaProcessing: <s> A </s>, then </s> B </s>, every
// token typed 0, with special tokens or without.
type robertaPost struct{ cls, sep int32 }

func (r robertaPost) process(parts []sequence, addSpecial bool) []sequence {
	out := make([]sequence, len(parts))
	for i, p := range parts {
		ids := p.ids
		if addSpecial {
			first := r.cls
			if i > 0 {
				first = r.sep
			}
			ids = append(append([]int32{first}, p.ids...), r.sep)
		}
		out[i] = sequence{ids: ids, types: make([]int32, len(ids))}
	}
	return out
}

// noPost is the ByteLevel post-processor, which changes only offsets.
type noPost struct{}

func (noPost) process(parts []sequence, _ bool) []sequence { return parts }

type rawPiece struct {
	SpecialToken *struct {
		ID     string `json:"id"`
		TypeID int64  `json:"type_id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID     string `json:"id"`
		TypeID int64  `json:"type_id"`
	} `json:"Sequence"`
}

type rawPost struct {
	Type          string            `json:"type"`
	Processors    []json.RawMessage `json:"processors"`
	Single        []rawPiece        `json:"single"`
	Pair          []rawPiece        `json:"pair"`
	SpecialTokens map[string]struct {
		IDs []int32 `json:"ids"`
	} `json:"special_tokens"`
	Cls json.RawMessage `json:"cls"`
	Sep json.RawMessage `json:"sep"`
}

// parseTemplate reads the single (pair false) or pair layout of a
// TemplateProcessing.
func (r *rawPost) parseTemplate(pieces []rawPiece, where string, pair bool) ([]templateItem, error) {
	items := make([]templateItem, 0, len(pieces))
	typeID := func(v int64, at string) (int32, error) {
		if v < 0 || v > math.MaxInt32 {
			return 0, fmt.Errorf("%s.type_id: %d is not a type id (0 or more)", at, v)
		}
		return int32(v), nil
	}
	for i, it := range pieces {
		at := fmt.Sprintf("%s[%d]", where, i)
		switch {
		case it.Sequence != nil:
			tid, err := typeID(it.Sequence.TypeID, at+".Sequence")
			if err != nil {
				return nil, err
			}
			seq := 0
			switch it.Sequence.ID {
			case "A":
			case "B":
				if !pair {
					return nil, fmt.Errorf("%s: the single template has one sequence, A; it cannot use B", at)
				}
				seq = 1
			default:
				return nil, fmt.Errorf("%s: sequence %q is neither A nor B", at, it.Sequence.ID)
			}
			items = append(items, templateItem{seq: seq, typeID: tid})
		case it.SpecialToken != nil:
			tid, err := typeID(it.SpecialToken.TypeID, at+".SpecialToken")
			if err != nil {
				return nil, err
			}
			st, ok := r.SpecialTokens[it.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("%s: special token %q is not in special_tokens", at, it.SpecialToken.ID)
			}
			items = append(items, templateItem{seq: -1, ids: append([]int32{}, st.IDs...), typeID: tid})
		default:
			return nil, fmt.Errorf("%s: neither SpecialToken nor Sequence", at)
		}
	}
	return items, nil
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
		var err error
		if t.single, err = r.parseTemplate(r.Single, where+".single", false); err != nil {
			return nil, err
		}
		// The tokenizers library refuses a TemplateProcessing without a
		// pair template, even to encode single texts.
		if r.Pair == nil {
			return nil, fmt.Errorf("%s.pair is missing (TemplateProcessing needs the pair template as well as the single one)", where)
		}
		if t.pair, err = r.parseTemplate(r.Pair, where+".pair", true); err != nil {
			return nil, err
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
		if r.Type == "BertProcessing" {
			return bertPost{cls: c, sep: s}, nil
		}
		return robertaPost{cls: c, sep: s}, nil
	}
	return nil, fmt.Errorf("%s: post-processor type %q is not supported", where, r.Type)
}
