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
	model model
	// vocab and tokens are the model's vocabulary both ways; tokens has ""
	// where an id has no model token.
	vocab  map[string]int32
	tokens []string
	post   postProcessor
	dec    decoder
	size   int
}

// model turns one pre-tokenized piece into ids: tokenizer.json's "model".
type model interface {
	tokenize(dst []int32, piece string) []int32
}

type rawFile struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	// Truncation and Padding are read and ignored: the tokenizers library
	// applies them in Tokenizer.encode (and transformers turns them off
	// unless asked); this package never cuts or pads a sequence, and its
	// callers refuse inputs longer than their model takes.
	Truncation json.RawMessage `json:"truncation"`
	Padding    json.RawMessage `json:"padding"`
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
// at fault. The truncation and padding settings are read and ignored:
// Encode and EncodePair never cut or pad.
func Parse(data []byte) (*Tokenizer, error) {
	var f rawFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %v", err)
	}
	if isNull(f.Model) {
		return nil, fmt.Errorf("model is missing")
	}
	t, err := parseModel(f.Model)
	if err != nil {
		return nil, err
	}
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
	t.size = len(t.tokens)
	for i, a := range f.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("added_tokens[%d]: id %d is negative", i, a.ID)
		}
		t.size = max(t.size, int(a.ID)+1)
	}
	t.added = newAddedVocab(f.AddedTokens, t.norm)
	return t, nil
}

// parseModel reads tokenizer.json's "model" into a Tokenizer that has only
// its model and vocabulary set. A model without a type is read as the
// tokenizers library reads one: BPE if it has merges, WordPiece if it has
// max_input_chars_per_word, Unigram if its vocab is a list.
func parseModel(data json.RawMessage) (*Tokenizer, error) {
	f, err := objectFields(data, "model")
	if err != nil {
		return nil, err
	}
	typ := ""
	if f.has("type") {
		if typ, err = f.str("type"); err != nil {
			return nil, err
		}
	}
	if typ == "WordPiece" || typ == "" && !f.has("merges") && f.has("max_input_chars_per_word") {
		wp, err := parseWordPiece(data)
		if err != nil {
			return nil, err
		}
		tokens, err := tokensByID(wp.vocab)
		if err != nil {
			return nil, err
		}
		return &Tokenizer{model: wp, vocab: wp.vocab, tokens: tokens}, nil
	}
	if typ == "Unigram" || typ == "" && !f.has("merges") && unigramVocabIsList(f.m["vocab"]) {
		u, err := parseUnigram(f)
		if err != nil {
			return nil, err
		}
		return &Tokenizer{model: u, vocab: u.vocab, tokens: u.tokens}, nil
	}
	var rm rawModel
	if err := json.Unmarshal(data, &rm); err != nil {
		return nil, fmt.Errorf("model: %v", err)
	}
	if rm.Type != "BPE" && !(rm.Type == "" && rm.Vocab != nil && len(rm.Merges) > 0) {
		return nil, fmt.Errorf("model.type %q is not supported (BPE, WordPiece and Unigram are)", rm.Type)
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
	m, err := newBPE(rm.Vocab, merges, str(rm.UnkToken), rm.FuseUnk, rm.ByteFallback, rm.IgnoreMerges,
		str(rm.ContinuingSubwordPrefix), str(rm.EndOfWordSuffix))
	if err != nil {
		return nil, err
	}
	return &Tokenizer{model: m, vocab: m.vocab, tokens: m.tokens}, nil
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
	id, ok := t.vocab[tok]
	return id, ok
}

// IDToToken returns the token string of an id.
func (t *Tokenizer) IDToToken(id int32) (string, bool) {
	if i, ok := t.added.byID[id]; ok {
		return t.added.tokens[i].Content, true
	}
	if id >= 0 && int(id) < len(t.tokens) && t.tokens[id] != "" {
		return t.tokens[id], true
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
// one per byte. However long text is, Encode neither truncates nor pads
// it, whatever tokenizer.json's truncation and padding say.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	ids := t.encodeText(text)
	if addSpecial && t.post != nil {
		// Without special tokens no post-processor changes the ids.
		ids, _ = t.postProcess([]sequence{{ids: ids}}, true)
	}
	return ids
}

// EncodeWithTypes is Encode that also returns the token type id (segment
// id) of each token, what BERT-style encoders read as token_type_ids. For
// one text they are 0 throughout, unless the post-processor's single
// template gives another type id.
func (t *Tokenizer) EncodeWithTypes(text string, addSpecial bool) (ids, typeIDs []int32) {
	return t.postProcess([]sequence{{ids: t.encodeText(text)}}, addSpecial)
}

// EncodePair encodes a pair of texts as one input, as the tokenizers
// library's encode(a, b) does: each text is encoded on its own, and the
// post-processor joins them with its pair layout (TemplateProcessing's
// pair template; BertProcessing's [CLS] a [SEP] b [SEP];
// RobertaProcessing's <s> a </s></s> b </s>, all of type 0). It returns
// the ids and the token type id of each: for a BERT cross-encoder (a
// reranker scoring a query against a document), [CLS] query [SEP] with
// type 0 and document [SEP] with type 1. Without addSpecial the special
// tokens are left out and the sequences keep their type ids. Without a
// post-processor the texts are concatenated, types 0 and 1. Like Encode, EncodePair neither truncates
// nor pads: callers check the length against their model's.
func (t *Tokenizer) EncodePair(a, b string, addSpecial bool) (ids, typeIDs []int32) {
	return t.postProcess([]sequence{{ids: t.encodeText(a)}, {ids: t.encodeText(b)}}, addSpecial)
}

// encodeText runs text through the pipeline up to the model: the ids of
// one sequence, before the post-processor.
func (t *Tokenizer) encodeText(text string) []int32 {
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
		} else if id >= 0 && int(id) < len(t.tokens) && t.tokens[id] != "" {
			s = t.tokens[id]
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
