package tokenizer

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/archgen/archgen/tokenizer/internal/reftest"
	"golang.org/x/text/unicode/norm"
)

var updateBertChars = flag.Bool("update-bert-chars", false, "rewrite bertchars.go from the reference's bert-chars.json")

// bertChars is bert-chars.json: what the tokenizers library's BERT
// normalizer and pre-tokenizer do to each code point alone.
type bertChars struct {
	Separator    rune      `json:"separator"`
	CleanDrops   [][2]rune `json:"clean_drops"`
	CleanSpaces  [][2]rune `json:"clean_spaces"`
	Chinese      [][2]rune `json:"chinese"`
	Punctuation  [][2]rune `json:"punctuation"`
	Whitespace   [][2]rune `json:"whitespace"`
	StripAccents [][2]any  `json:"strip_accents"`
	Lowercase    [][2]any  `json:"lowercase"`
}

type runeSet map[rune]bool

func setOf(ranges [][2]rune) runeSet {
	s := runeSet{}
	for _, r := range ranges {
		for c := r[0]; c <= r[1]; c++ {
			s[c] = true
		}
	}
	return s
}

// mapOf reads [[code point, text], ...].
func mapOf(t *testing.T, pairs [][2]any) map[rune]string {
	m := make(map[rune]string, len(pairs))
	for _, p := range pairs {
		c, ok1 := p[0].(float64)
		s, ok2 := p[1].(string)
		if !ok1 || !ok2 {
			t.Fatalf("bert-chars.json: %v is not [code point, text]", p)
		}
		m[rune(c)] = s
	}
	return m
}

func loadBertChars(t *testing.T) *bertChars {
	t.Helper()
	dir, err := reftest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "bert-chars.json"))
	if err != nil {
		t.Fatal(err)
	}
	var bc bertChars
	if err := json.Unmarshal(b, &bc); err != nil {
		t.Fatalf("bert-chars.json: %v", err)
	}
	return &bc
}

// TestBertCharClasses checks BERT's character classes, code point by code
// point, against what the tokenizers library does: clean_text,
// handle_chinese_chars, strip_accents and lowercase, and the
// pre-tokenizer's punctuation and whitespace. With -update-bert-chars it
// first rewrites bertchars.go from the same reference.
func TestBertCharClasses(t *testing.T) {
	bc := loadBertChars(t)
	strip, lower := mapOf(t, bc.StripAccents), mapOf(t, bc.Lowercase)
	if *updateBertChars {
		writeBertChars(t, bc, strip, lower)
		t.Skip("bertchars.go rewritten: run the tests again to check it")
	}
	drops, spaces, chinese := setOf(bc.CleanDrops), setOf(bc.CleanSpaces), setOf(bc.Chinese)
	punct, white := setOf(bc.Punctuation), setOf(bc.Whitespace)
	if len(drops) < 1000 || len(punct) < 500 || len(strip) < 1000 || len(lower) < 1000 || len(white) < 20 {
		t.Fatalf("the reference is too small: %d dropped, %d punctuation, %d stripped, %d lowercased, %d whitespace",
			len(drops), len(punct), len(strip), len(lower), len(white))
	}
	bad := map[string]int{}
	check := func(class string, r rune, got, want any) {
		if got == want {
			return
		}
		bad[class]++
		if bad[class] <= 5 {
			t.Errorf("%s of %U: got %+q, the library gives %+q", class, r, got, want)
		}
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r == bc.Separator || !utf8.ValidRune(r) {
			continue
		}
		s := string(r)
		want := s
		if drops[r] {
			want = ""
		} else if spaces[r] {
			want = " "
		}
		check("clean_text", r, cleanText(s), want)
		want = s
		if chinese[r] {
			want = " " + s + " "
		}
		check("handle_chinese_chars", r, spaceChinese(s), want)
		want = s
		if v, ok := strip[r]; ok {
			want = v
		}
		check("strip_accents", r, stripAccents(s), want)
		want = s
		if v, ok := lower[r]; ok {
			want = v
		}
		check("lowercase", r, lowercase{}.normalize(s), want)
		check("punctuation", r, isBertPunct(r), punct[r])
		check("whitespace", r, isSpace(r), white[r])
	}
	for class, n := range bad {
		t.Errorf("%s: %d code points differ", class, n)
	}
}

// writeBertChars writes bertchars.go: the library's classes as range
// tables, and where Go's own decomposition and lowercase differ from the
// library's.
func writeBertChars(t *testing.T, bc *bertChars, strip, lower map[rune]string) {
	var marks, kept []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r == bc.Separator || !utf8.ValidRune(r) {
			continue
		}
		v, ok := strip[r]
		if ok && v == "" {
			marks = append(marks, r)
		}
		if !ok && norm.NFD.String(string(r)) != string(r) {
			// Left whole by the library, decomposed by Go.
			if norm.NFD.PropertiesString(string(r)).CCC() != 0 {
				t.Fatalf("%U: the library leaves it whole and it is no starter; stripAccents cannot keep it", r)
			}
			kept = append(kept, r)
		}
	}
	newer := map[rune]rune{}
	for r, l := range lower {
		base := string(unicode.ToLower(r))
		if r == 0x130 {
			base = "i\u0307"
		}
		if l == base {
			continue
		}
		lr, n := utf8.DecodeRuneInString(l)
		if n != len(l) {
			t.Fatalf("%U lowercases to %q, more than one character, which Go's tables do not give", r, l)
		}
		newer[r] = lr
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if _, ok := lower[r]; !ok && utf8.ValidRune(r) && unicode.ToLower(r) != r && r != bc.Separator {
			t.Fatalf("%U: Go lowercases it, the library does not", r)
		}
	}

	var b bytes.Buffer
	b.WriteString(`// Code generated by TestBertCharClasses from the tokenizers library
// (go test ./tokenizer -run TestBertCharClasses -update-bert-chars); DO NOT EDIT.

package tokenizer

import "unicode"

`)
	table := func(name, doc string, set []rune) {
		fmt.Fprintf(&b, "// %s\nvar %s = &unicode.RangeTable{\n", doc, name)
		var r16, r32 []string
		latin := 0
		for i := 0; i < len(set); {
			j := i
			for j+1 < len(set) && set[j+1] == set[j]+1 {
				j++
			}
			lo, hi := set[i], set[j]
			if hi <= 0xFFFF {
				r16 = append(r16, fmt.Sprintf("{0x%04X, 0x%04X, 1},", lo, hi))
				if hi <= unicode.MaxLatin1 {
					latin++
				}
			} else {
				if lo <= 0xFFFF {
					r16 = append(r16, fmt.Sprintf("{0x%04X, 0xFFFF, 1},", lo))
					lo = 0x10000
				}
				r32 = append(r32, fmt.Sprintf("{0x%X, 0x%X, 1},", lo, hi))
			}
			i = j + 1
		}
		if len(r16) > 0 {
			fmt.Fprintf(&b, "R16: []unicode.Range16{\n")
			for _, r := range r16 {
				b.WriteString(r + "\n")
			}
			b.WriteString("},\n")
		}
		if len(r32) > 0 {
			fmt.Fprintf(&b, "R32: []unicode.Range32{\n")
			for _, r := range r32 {
				b.WriteString(r + "\n")
			}
			b.WriteString("},\n")
		}
		fmt.Fprintf(&b, "LatinOffset: %d,\n}\n\n", latin)
	}
	sorted := func(s runeSet) []rune {
		out := make([]rune, 0, len(s))
		for r := range s {
			out = append(out, r)
		}
		slices.Sort(out)
		return out
	}
	table("cleanTextDrops", "cleanTextDrops is what clean_text drops: U+0000, U+FFFD and the control,\n"+
		"// format and private-use characters (Cc, Cf, Co) of Unicode 8.0, but tab,\n// newline and carriage return.",
		sorted(setOf(bc.CleanDrops)))
	table("bertPunctuation", "bertPunctuation is what BertPreTokenizer isolates: ASCII punctuation and\n"+
		"// symbols, and Unicode 8.0's punctuation (P*).", sorted(setOf(bc.Punctuation)))
	table("nonspacingMarks", "nonspacingMarks is what strip_accents drops after decomposing: Unicode\n"+
		"// 8.0's nonspacing marks (Mn), and the characters that decompose to them\n// alone.", marks)
	table("nfdKept", "nfdKept are characters Go's NFD decomposes and the library's does not\n"+
		"// (its decomposition tables being older).", kept)
	keys := make([]rune, 0, len(newer))
	for r := range newer {
		keys = append(keys, r)
	}
	slices.Sort(keys)
	b.WriteString("// lowercaseNewer are the lowercase mappings of the library's Unicode\n" +
		"// version that Go's tables lack.\nvar lowercaseNewer = map[rune]rune{\n")
	for _, r := range keys {
		fmt.Fprintf(&b, "0x%X: 0x%X,\n", r, newer[r])
	}
	b.WriteString("}\n\n")
	from := rune(unicode.MaxRune + 1)
	if len(keys) > 0 {
		from = keys[0]
	}
	fmt.Fprintf(&b, "// lowercaseNewerFrom is the least key of lowercaseNewer.\nconst lowercaseNewerFrom = 0x%X\n", from)
	src, err := format.Source(b.Bytes())
	if err != nil {
		t.Fatalf("bertchars.go: %v\n%s", err, b.Bytes())
	}
	if err := os.WriteFile("bertchars.go", src, 0o644); err != nil {
		t.Fatal(err)
	}
}
