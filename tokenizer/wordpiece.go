package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// wordPiece is the WordPiece model of BERT and its kin (tokenizer.json's
// "model": {"type": "WordPiece"}): each pre-tokenized word is cut, from its
// start, into the longest piece the vocabulary holds, then the longest
// piece after it (spelled with the continuing-subword prefix, ##), and so
// on. A word that cannot be cut that way to its end, or one of more than
// maxChars characters, becomes the unknown token alone.
type wordPiece struct {
	vocab    map[string]int32
	unk      int32
	prefix   string // continuing_subword_prefix
	maxChars int    // max_input_chars_per_word
}

// parseWordPiece reads a WordPiece model. The tokenizers library requires
// all four keys; so does this.
func parseWordPiece(data json.RawMessage) (*wordPiece, error) {
	f, err := objectFields(data, "model")
	if err != nil {
		return nil, err
	}
	m := &wordPiece{}
	if m.vocab, err = f.vocabulary("vocab"); err != nil {
		return nil, err
	}
	unk, err := f.str("unk_token")
	if err != nil {
		return nil, err
	}
	id, ok := m.vocab[unk]
	if !ok {
		return nil, fmt.Errorf("model.unk_token %q is not in model.vocab", unk)
	}
	m.unk = id
	if m.prefix, err = f.str("continuing_subword_prefix"); err != nil {
		return nil, err
	}
	if m.maxChars, err = f.count("max_input_chars_per_word"); err != nil {
		return nil, err
	}
	return m, nil
}

// tokenize appends the ids of one word to dst.
func (m *wordPiece) tokenize(dst []int32, word string) []int32 {
	if word == "" {
		return dst
	}
	if utf8.RuneCountInString(word) > m.maxChars {
		return append(dst, m.unk)
	}
	n := len(dst)
	var key []byte // prefix + candidate, for the pieces after the first
	for start := 0; start < len(word); {
		id := int32(-1)
		end := len(word)
		for end > start {
			var ok bool
			if start == 0 {
				id, ok = m.vocab[word[:end]]
			} else {
				key = append(append(key[:0], m.prefix...), word[start:end]...)
				id, ok = m.vocab[string(key)]
			}
			if ok {
				break
			}
			id = -1
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if id < 0 {
			return append(dst[:n], m.unk)
		}
		dst = append(dst, id)
		start = end
	}
	return dst
}
