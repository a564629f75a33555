package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and decodes ids to text as a
// tokenizer.json file describes. It is safe for concurrent use.
type Tokenizer struct {
	added *addedVocab
	norm  normalizer
	pre   preTokenizer
	model *bpe
	post  postProcessor
	dec   decoder
	size  int
}

type rawFile struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

type rawModel struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	UnkToken                *string          `json:"unk_token"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	Dropout                 *float64         `json:"dropout"`
}

// LoadFile reads a tokenizer.json file.
func LoadFile(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse reads the contents of a tokenizer.json file. Errors name the key
// at fault.
func Parse(data []byte) (*Tokenizer, error) {
	var f rawFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %v", err)
	}
	if isNull(f.Model) {
		return nil, fmt.Errorf("model is missing")
	}
	var rm rawModel
	if err := json.Unmarshal(f.Model, &rm); err != nil {
		return nil, fmt.Errorf("model: %v", err)
	}
	if rm.Type != "BPE" && !(rm.Type == "" && rm.Vocab != nil && len(rm.Merges) > 0) {
		return nil, fmt.Errorf("model.type %q is not supported (only BPE is)", rm.Type)
	}
	if rm.Dropout != nil && *rm.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout %v is not supported", *rm.Dropout)
	}
	merges, err := parseMerges(rm.Merges)
	if err != nil {
		return nil, err
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	model, err := newBPE(rm.Vocab, merges, str(rm.UnkToken), rm.FuseUnk, rm.ByteFallback, rm.IgnoreMerges,
		str(rm.ContinuingSubwordPrefix), str(rm.EndOfWordSuffix))
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{model: model}
	if t.norm, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, err
	}
	if t.post, err = parsePost(f.PostProcessor, "post_processor"); err != nil {
		return nil, err
	}
	if t.dec, err = parseDecoder(f.Decoder, "decoder"); err != nil {
		return nil, err
	}
	t.size = len(model.tokens)
	for i, a := range f.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("added_tokens[%d]: id %d is negative", i, a.ID)
		}
		t.size = max(t.size, int(a.ID)+1)
	}
	t.added = newAddedVocab(f.AddedTokens, t.norm)
	return t, nil
}

// parseMerges reads model.merges in either form: "a b" strings or [a, b]
// pairs.
func parseMerges(data json.RawMessage) ([][2]string, error) {
	if isNull(data) {
		return nil, fmt.Errorf("model.merges is missing")
	}
	var pairs [][2]string
	if err := json.Unmarshal(data, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(data, &lines); err != nil {
		return nil, fmt.Errorf("model.merges: neither a list of strings nor of pairs: %v", err)
	}
	pairs = make([][2]string, 0, len(lines))
	for _, l := range lines {
		if strings.HasPrefix(l, "#version") {
			continue
		}
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("model.merges[%d]: %q is not two tokens separated by one space", len(pairs), l)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	return pairs, nil
}

// VocabSize is one more than the largest id, added tokens included.
func (t *Tokenizer) VocabSize() int { return t.size }

// TokenToID returns the id of a token string (an added token's content or
// a model token as the vocabulary spells it).
func (t *Tokenizer) TokenToID(tok string) (int32, bool) {
	if id, ok := t.added.byContent[tok]; ok {
		return id, true
	}
	id, ok := t.model.vocab[tok]
	return id, ok
}

// IDToToken returns the token string of an id.
func (t *Tokenizer) IDToToken(id int32) (string, bool) {
	if i, ok := t.added.byID[id]; ok {
		return t.added.tokens[i].Content, true
	}
	if id >= 0 && int(id) < len(t.model.tokens) && t.model.tokens[id] != "" {
		return t.model.tokens[id], true
	}
	return "", false
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int32) bool {
	i, ok := t.added.byID[id]
	return ok && t.added.tokens[i].Special
}

// AddedTokens returns the added tokens, in the order of the file.
func (t *Tokenizer) AddedTokens() []AddedToken {
	return append([]AddedToken(nil), t.added.tokens...)
}

// SetSplitSpecialTokens makes Encode treat the text of special tokens like
// any other text (transformers' split_special_tokens). It must not be
// called while other goroutines use t.
func (t *Tokenizer) SetSplitSpecialTokens(split bool) { t.added.encodeSpecial = split }

// Encode returns the token ids of text. With addSpecial, the
// post-processor adds the special tokens that frame a sequence (a BOS
// token, say). Bytes of text that are not valid UTF-8 are read as U+FFFD,
// one per byte.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	text = validUTF8(text)
	ids := make([]int32, 0, len(text)/3+4)
	for _, sp := range t.added.split(text, t.added.raw) {
		if sp.token >= 0 {
			ids = append(ids, t.added.tokens[sp.token].ID)
			continue
		}
		s := text[sp.start:sp.end]
		if t.norm != nil {
			s = t.norm.normalize(s)
		}
		for _, sp2 := range t.added.split(s, t.added.normalized) {
			if sp2.token >= 0 {
				ids = append(ids, t.added.tokens[sp2.token].ID)
				continue
			}
			p := []piece{{s: s[sp2.start:sp2.end], atStart: sp.start == 0 && sp2.start == 0}}
			if t.pre != nil {
				p = t.pre.preTokenize(p)
			}
			for _, q := range p {
				ids = t.model.tokenize(ids, q.s)
			}
		}
	}
	if addSpecial && t.post != nil {
		ids = t.post.process(ids)
	}
	return ids
}

// validUTF8 replaces each byte of s that is not part of a valid UTF-8
// sequence by U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// tokenStrings returns the strings the decoder reads for ids: ids no
// token has are left out, and so are special tokens when skipSpecial is
// set.
func (t *Tokenizer) tokenStrings(ids []int32, skipSpecial bool) []string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		var s string
		if i, ok := t.added.byID[id]; ok {
			s = t.added.tokens[i].Content
			if d, ok := t.added.decodeText[id]; ok {
				s = d
			}
		} else if id >= 0 && int(id) < len(t.model.tokens) && t.model.tokens[id] != "" {
			s = t.model.tokens[id]
		} else {
			continue
		}
		if skipSpecial && t.added.special[s] {
			continue
		}
		toks = append(toks, s)
	}
	return toks
}

// Decode returns the text of ids. Ids no token has are left out; with
// skipSpecial, so are special tokens.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	s, _ := t.decode(ids, skipSpecial)
	return s
}

// TokenBytes returns the bytes token id stands for, as Decode of it alone
// has them but without turning bytes that are not valid UTF-8 into U+FFFD:
// a byte-level or byte-fallback token that holds part of a character gives
// that part. (What an OpenAI-style response's logprobs call the token's
// bytes.) An id no token has gives nil.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	toks := t.tokenStrings([]int32{id}, false)
	if len(toks) == 0 {
		return nil
	}
	if t.dec == nil {
		return []byte(toks[0])
	}
	return []byte(strings.Join(t.dec.decode(toks, &decodeState{raw: true}), ""))
}

// decode is Decode that also reports whether the text ends in a character
// whose bytes are not all there yet.
func (t *Tokenizer) decode(ids []int32, skipSpecial bool) (string, bool) {
	toks := t.tokenStrings(ids, skipSpecial)
	if t.dec == nil {
		return strings.Join(toks, " "), false
	}
	var st decodeState
	out := t.dec.decode(toks, &st)
	if len(out) == 1 {
		return out[0], st.incomplete
	}
	var b bytes.Buffer
	for _, s := range out {
		b.WriteString(s)
	}
	return b.String(), st.incomplete
}
