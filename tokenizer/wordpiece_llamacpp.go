package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// llamaCppWordPiece is archgen's own normalizer type "LlamaCppWordPiece",
// which the GGUF reader writes for llama.cpp's WordPiece vocabularies
// (tokenizer.ggml.model "bert"): the text prepared as llama.cpp prepares it
// before cutting words into pieces, which differs from BERT's normalizer in
// the tokenizers library. Each code point, in order:
//
//   - with strip_accents, becomes the first code point of its canonical
//     decomposition (é is e, a Hangul syllable its leading jamo: llama.cpp
//     maps one code point to one);
//   - whitespace becomes a space;
//   - U+0000, U+FFFD and other code points of category C are dropped, and
//     with strip_accents every mark (category M, spacing ones included);
//   - with lowercase, becomes its simple lowercase (İ is i);
//   - punctuation (category P, and ASCII symbols) and CJK ideographs get a
//     space on each side: llama.cpp makes each a word of its own.
//
// A WhitespaceSplit pre-tokenizer then gives llama.cpp's words.
type llamaCppWordPiece struct {
	lowercase, stripAccents bool
}

func parseLlamaCppWordPiece(f fields) (normalizer, error) {
	var n llamaCppWordPiece
	var err error
	if n.lowercase, err = f.boolean("lowercase"); err != nil {
		return nil, err
	}
	if n.stripAccents, err = f.boolean("strip_accents"); err != nil {
		return nil, err
	}
	return n, nil
}

func (n llamaCppWordPiece) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if n.stripAccents {
			r = firstOfDecomposition(r)
		}
		switch {
		case unicode.IsSpace(r):
			b.WriteByte(' ')
			continue
		case r == 0 || r == 0xFFFD || unicode.Is(unicode.C, r):
			continue
		case n.stripAccents && unicode.Is(unicode.M, r):
			continue
		}
		alone := unicode.Is(unicode.P, r) || (r < 0x7F && unicode.Is(unicode.S, r)) || isChinese(r)
		if n.lowercase {
			r = unicode.ToLower(r)
		}
		if alone {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// firstOfDecomposition is the first code point of r's canonical
// decomposition (r itself where it has none, which costs no allocation).
func firstOfDecomposition(r rune) rune {
	if r < 0xC0 {
		return r
	}
	var buf [utf8.UTFMax]byte
	b := buf[:utf8.EncodeRune(buf[:], r)]
	if norm.NFD.IsNormal(b) {
		return r
	}
	first, _ := utf8.DecodeRune(norm.NFD.Bytes(b))
	return first
}
