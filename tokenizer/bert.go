package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The parts of BERT's pipeline: its normalizer, its pre-tokenizer and the
// WordPiece decoder (the WordPiece model is in wordpiece.go).
//
// The tokenizers library decides what a control character, a punctuation
// character or a nonspacing mark is with the tables of the Rust crate
// unicode_categories, which date from Unicode 8.0, and decomposes with a
// normalization crate of its own; Go's tables are of a later Unicode. The
// classes below are the library's (bertchars.go, written from what the
// library does with each code point), not Go's.

// bertNormalizer is tokenizer.json's "BertNormalizer", its steps in this
// order: clean_text drops U+0000, U+FFFD and control characters (other
// than tab, newline and carriage return) and turns whitespace into spaces;
// handle_chinese_chars puts a space on each side of every CJK ideograph;
// strip_accents decomposes (NFD) and drops nonspacing marks; lowercase
// lowercases as the Lowercase normalizer does.
type bertNormalizer struct {
	cleanText, chineseChars, stripAccents, lowercase bool
}

func (n bertNormalizer) normalize(s string) string {
	if n.cleanText {
		s = cleanText(s)
	}
	if n.chineseChars {
		s = spaceChinese(s)
	}
	if n.stripAccents {
		s = stripAccents(s)
	}
	if n.lowercase {
		s = lowercase{}.normalize(s)
	}
	return s
}

func parseBertNormalizer(f fields) (normalizer, error) {
	var n bertNormalizer
	var err error
	if n.cleanText, err = f.boolean("clean_text"); err != nil {
		return nil, err
	}
	if n.chineseChars, err = f.boolean("handle_chinese_chars"); err != nil {
		return nil, err
	}
	if n.lowercase, err = f.boolean("lowercase"); err != nil {
		return nil, err
	}
	// strip_accents null (or absent) follows lowercase.
	strip, err := f.optBoolean("strip_accents")
	if err != nil {
		return nil, err
	}
	n.stripAccents = n.lowercase
	if strip != nil {
		n.stripAccents = *strip
	}
	return n, nil
}

// cleanText drops what clean_text drops and turns the remaining
// whitespace into spaces.
func cleanText(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case dropsInCleanText(r):
		case r != ' ' && isSpace(r):
		default:
			continue
		}
		// A change: rewrite from here on.
		b.Grow(len(s))
		b.WriteString(s[:i])
		for _, r := range s[i:] {
			switch {
			case dropsInCleanText(r):
			case isSpace(r):
				b.WriteByte(' ')
			default:
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	return s
}

func dropsInCleanText(r rune) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7F
	}
	return unicode.Is(cleanTextDrops, r)
}

// isChinese reports whether r is a CJK ideograph as BERT counts them: the
// CJK Unified Ideographs blocks and extensions A to E, and the
// compatibility ideographs. Hangul, kana and the extensions after E are
// not.
func isChinese(r rune) bool {
	switch {
	case r < 0x3400:
		return false
	case r <= 0x4DBF:
		return true
	case r >= 0x4E00 && r <= 0x9FFF, r >= 0xF900 && r <= 0xFAFF:
		return true
	case r >= 0x20000 && r <= 0x2A6DF, r >= 0x2A700 && r <= 0x2B73F, r >= 0x2B740 && r <= 0x2B81F,
		r >= 0x2B920 && r <= 0x2CEAF, r >= 0x2F800 && r <= 0x2FA1F:
		return true
	}
	return false
}

func spaceChinese(s string) string {
	i := strings.IndexFunc(s, isChinese)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if isChinese(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// stripAccents decomposes s (NFD) and drops the nonspacing marks. The
// characters of nfdKept, which the library's decomposition leaves whole,
// are kept whole; each is a starter, so the text between them decomposes
// on its own as it would with them.
func stripAccents(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	keep := func(d string) {
		for _, r := range d {
			if r < 0x300 || !unicode.Is(nonspacingMarks, r) {
				b.WriteRune(r)
			}
		}
	}
	start := 0
	for i, r := range s {
		if r >= utf8.RuneSelf && unicode.Is(nfdKept, r) {
			keep(norm.NFD.String(s[start:i]))
			b.WriteRune(r)
			start = i + utf8.RuneLen(r)
		}
	}
	keep(norm.NFD.String(s[start:]))
	return b.String()
}

// bertPre is tokenizer.json's "BertPreTokenizer": it splits at whitespace,
// which it drops, and makes each punctuation character a piece of its own.
type bertPre struct{}

func (bertPre) preTokenize(in []piece) []piece {
	out := make([]piece, 0, len(in)*2)
	for _, p := range in {
		word := -1
		flush := func(end int) {
			if word >= 0 {
				out = append(out, piece{s: p.s[word:end], atStart: p.atStart && word == 0})
				word = -1
			}
		}
		for i, r := range p.s {
			switch {
			case isSpace(r):
				flush(i)
			case isBertPunct(r):
				flush(i)
				out = append(out, piece{s: p.s[i : i+utf8.RuneLen(r)], atStart: p.atStart && i == 0})
			case word < 0:
				word = i
			}
		}
		flush(len(p.s))
	}
	return out
}

// isBertPunct reports whether BERT splits r off as punctuation: the ASCII
// punctuation and symbols, and the library's Unicode punctuation (P*).
func isBertPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~'
	}
	return unicode.Is(bertPunctuation, r)
}

// wordPieceDec is tokenizer.json's WordPiece decoder: every token after
// the first loses the continuing-subword prefix if it has it and gains a
// leading space if not; with cleanup, each token then loses the spaces
// tokenization put before punctuation and contractions.
type wordPieceDec struct {
	prefix  string
	cleanup bool
}

func (d wordPieceDec) decode(toks []string, _ *decodeState) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		if i > 0 {
			if strings.HasPrefix(t, d.prefix) {
				t = t[len(d.prefix):]
			} else {
				t = " " + t
			}
		}
		if d.cleanup {
			t = cleanupTokenization(t)
		}
		out[i] = t
	}
	return out
}

// cleanupTokenization is the tokenizers library's cleanup of decoded
// text: each replacement in turn, over the whole string.
func cleanupTokenization(s string) string {
	if !strings.Contains(s, " ") {
		return s
	}
	for _, r := range [...][2]string{
		{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
		{" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
	} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}
