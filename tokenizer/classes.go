package tokenizer

import "fmt"

// The pipelines transformers' AutoTokenizer builds in place of the one a
// folder's tokenizer.json describes, for the tokenizer classes whose
// constructors rebuild it (NewPretrained picks them by tokenizer_class).

// llamaClass returns t with the pipeline transformers' LlamaTokenizer
// builds: no normalizer; a Metaspace pre-tokenizer that does not split and
// prepends ▁ always (legacy), to the first piece only (not legacy) or never
// (add_prefix_space false); and a decoder that turns ▁ into spaces, reads
// byte tokens, and strips the one leading space a prefix added.
func (t *Tokenizer) llamaClass(c *Config) *Tokenizer {
	prefix := c.AddPrefixSpace == nil || *c.AddPrefixSpace
	legacy := c.Legacy != nil && *c.Legacy
	scheme := prependNever
	if prefix {
		scheme = prependFirst
		if legacy {
			scheme = prependAlways
		}
	}
	dec := decSequence{replaceDec{pattern{lit: "▁", isLit: true}, " "}, byteFallbackDec{}, fuseDec{}}
	if prefix {
		dec = append(dec, stripDec{' ', 1, 0})
	}
	u := &Tokenizer{
		pre:    metaspace{repl: '▁', scheme: scheme, split: false},
		model:  t.model,
		vocab:  t.vocab,
		tokens: t.tokens,
		post:   t.post,
		dec:    dec,
		size:   t.size,
	}
	u.added = newAddedVocab(t.added.tokens, nil)
	u.added.encodeSpecial = t.added.encodeSpecial
	return u
}

// xlmRobertaUnk is the unknown piece's id transformers' XLMRobertaTokenizer
// builds its Unigram model with, whatever tokenizer.json says.
const xlmRobertaUnk = 3

// xlmRobertaClass returns t with the pipeline transformers 5's
// XLMRobertaTokenizer builds from a folder (XLM-RoBERTa, bge-m3,
// multilingual-e5 and the rerankers on them): the file's Unigram pieces and
// scores with the unknown piece at id 3 and no byte fallback; of the file's
// normalizer only its Precompiled charsmap; runs of whitespace split off
// before a Metaspace that prepends ▁ to every piece (none where
// add_prefix_space is false) and splits at each; the Metaspace decoder;
// <s> A </s> and <s> A </s></s> B </s> around texts, every token of type 0;
// and as added tokens only the configured special tokens (bos, eos, unk,
// sep, pad, cls, mask, with XLM-R's defaults), matched in the raw text,
// then added_tokens_decoder's with their own options: the file's other
// added tokens are not read. A tokenizer.json whose model is not Unigram is
// kept as it is; a special token the vocabulary lacks is refused.
func (t *Tokenizer) xlmRobertaClass(c *Config) (*Tokenizer, error) {
	u, ok := t.model.(*unigram)
	if !ok {
		return t, nil
	}
	if len(u.tokens) <= xlmRobertaUnk {
		return nil, fmt.Errorf("tokenizer_class %s: the Unigram vocab holds %d pieces, and the class reads id %d as the unknown one", c.TokenizerClass, len(u.tokens), xlmRobertaUnk)
	}
	model := u.withUnknown(xlmRobertaUnk)
	scheme := prependAlways
	if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
		scheme = prependNever
	}
	r := &Tokenizer{
		norm:   charsmapOf(t.norm),
		pre:    preSequence{splitPre{pattern{fn: isSpace}, removed, false}, metaspace{repl: '▁', scheme: scheme, split: true}},
		model:  model,
		vocab:  t.vocab,
		tokens: t.tokens,
		dec:    metaspaceDec{'▁', scheme},
		size:   t.size,
	}
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	var added []AddedToken
	ids := map[string]int32{}
	for _, sp := range []struct{ key, tok string }{
		{"bos_token", or(c.BOSToken, "<s>")}, {"eos_token", or(c.EOSToken, "</s>")}, {"unk_token", or(c.UNKToken, "<unk>")},
		{"sep_token", or(c.SEPToken, "</s>")}, {"pad_token", or(c.PADToken, "<pad>")}, {"cls_token", or(c.CLSToken, "<s>")},
		{"mask_token", or(c.MaskToken, "<mask>")},
	} {
		id, ok := t.TokenToID(sp.tok)
		if !ok {
			return nil, fmt.Errorf("%s %q is not a token of tokenizer.json", sp.key, sp.tok)
		}
		ids[sp.key] = id
		added = append(added, AddedToken{ID: id, Content: sp.tok, Special: true})
	}
	added = append(added, c.AddedTokensDecoder...)
	bos, eos := templateItem{seq: -1, ids: []int32{ids["bos_token"]}}, templateItem{seq: -1, ids: []int32{ids["eos_token"]}}
	r.post = template{
		single: []templateItem{bos, {seq: 0}, eos},
		pair:   []templateItem{bos, {seq: 0}, eos, eos, {seq: 1}, eos},
	}
	r.added = newAddedVocab(added, r.norm)
	r.added.encodeSpecial = t.added.encodeSpecial
	return r, nil
}

// charsmapOf is n's Precompiled normalizer: n itself, the first of a
// sequence, or nil where it has none.
func charsmapOf(n normalizer) normalizer {
	switch n := n.(type) {
	case *precompiled:
		return n
	case normSequence:
		for _, m := range n {
			if p, ok := m.(*precompiled); ok {
				return p
			}
		}
	}
	return nil
}
