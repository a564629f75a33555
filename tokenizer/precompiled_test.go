package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

// precompiledRef is precompiled.json: what the tokenizers library's
// Precompiled normalizer makes of texts and of every code point with the
// xlmr tokenizer's charsmap, and of the grapheme probe.
type precompiledRef struct {
	Charsmap string `json:"charsmap"`
	Cases    []struct {
		Text       string `json:"text"`
		Normalized string `json:"normalized"`
	} `json:"cases"`
	Points [][2]any `json:"points"`
	Probe  struct {
		Charsmap   string    `json:"charsmap"`
		Wide       [][2]rune `json:"wide"`
		Narrow     [][2]rune `json:"narrow"`
		NarrowFrom int       `json:"narrow_from"`
		Contexts   []struct {
			Context string `json:"context"`
			Lengths string `json:"lengths"`
		} `json:"contexts"`
	} `json:"probe"`
}

var loadPrecompiledRef = sync.OnceValues(func() (*precompiledRef, error) {
	dir, err := reftest.Dir()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "precompiled.json"))
	if err != nil {
		return nil, err
	}
	var ref precompiledRef
	if err := json.Unmarshal(b, &ref); err != nil {
		return nil, fmt.Errorf("precompiled.json: %v", err)
	}
	return &ref, nil
})

func TestPrecompiledMatchesReference(t *testing.T) {
	ref, err := loadPrecompiledRef()
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePrecompiled(ref.Charsmap, "charsmap")
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) < 100 {
		t.Fatalf("only %d cases", len(ref.Cases))
	}
	for _, c := range ref.Cases {
		if got := p.normalize(c.Text); got != c.Normalized {
			t.Errorf("normalize(%q) = %q, want %q", c.Text, got, c.Normalized)
		}
	}

	// Every code point alone, between NULs.
	want := map[rune]string{}
	for _, e := range ref.Points {
		want[rune(e[0].(float64))] = e[1].(string)
	}
	if len(want) < 1000 {
		t.Fatalf("the charsmap changes only %d code points", len(want))
	}
	var b strings.Builder
	var points []rune
	for r := rune(1); r <= utf8.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		if len(points) > 0 {
			b.WriteByte(0)
		}
		b.WriteRune(r)
		points = append(points, r)
	}
	got := strings.Split(p.normalize(b.String()), "\x00")
	if len(got) != len(points) {
		t.Fatalf("%d pieces for %d code points", len(got), len(points))
	}
	bad := 0
	for i, r := range points {
		w, ok := want[r]
		if !ok {
			w = string(r)
		}
		if got[i] != w {
			bad++
			if bad <= 10 {
				t.Errorf("U+%04X alone: %q, want %q", r, got[i], w)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d code points differ", bad)
	}
}

// TestGraphemesMatchReference runs the grapheme probe: every code point in
// contexts that show, with a charsmap that turns each whole cluster into
// one "#", where the library's grapheme clusters end. It checks the
// grapheme tables and rules against the library's.
func TestGraphemesMatchReference(t *testing.T) {
	ref, err := loadPrecompiledRef()
	if err != nil {
		t.Fatal(err)
	}
	pr := ref.Probe
	p, err := parsePrecompiled(pr.Charsmap, "probe charsmap")
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Contexts) < 10 {
		t.Fatalf("only %d contexts", len(pr.Contexts))
	}
	for k, ctx := range pr.Contexts {
		ranges := pr.Wide
		if k >= pr.NarrowFrom {
			ranges = pr.Narrow
		}
		var ys []rune
		var b strings.Builder
		for _, rg := range ranges {
			for r := rg[0]; r <= rg[1]; r++ {
				if r >= 0xD800 && r <= 0xDFFF || r == '\n' || r == '\r' {
					continue
				}
				if len(ys) > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(strings.ReplaceAll(ctx.Context, "Y", string(r)))
				ys = append(ys, r)
			}
		}
		lines := strings.Split(p.normalize(b.String()), "\n")
		if len(lines) != len(ys) || len(ctx.Lengths) != len(ys) {
			t.Fatalf("context %q: %d lines and %d lengths for %d code points", ctx.Context, len(lines), len(ctx.Lengths), len(ys))
		}
		bad := 0
		for i, y := range ys {
			if n := utf8.RuneCountInString(lines[i]); n != int(ctx.Lengths[i]-'0') {
				bad++
				if bad <= 5 {
					t.Errorf("context %q, Y = U+%04X: %q, want %c characters", ctx.Context, y, lines[i], ctx.Lengths[i])
				}
			}
		}
		if bad > 0 {
			t.Errorf("context %q: %d code points differ", ctx.Context, bad)
		}
	}
}

// charsmap builds a precompiled_charsmap from trie units and replacement
// strings, base64-encoded.
func charsmap(units []uint32, repl string) string {
	b := binary.LittleEndian.AppendUint32(nil, uint32(4*len(units)))
	for _, u := range units {
		b = binary.LittleEndian.AppendUint32(b, u)
	}
	return base64.StdEncoding.EncodeToString(append(b, repl...))
}

// oneKey is a charsmap of one key, "a", replaced by "b": the root's
// children sit in the second block of 256 units, the value in the third.
func oneKey() ([]uint32, string) {
	units := make([]uint32, 768)
	units[0] = 256 << 10
	units[256^'a'] = 'a' | 1<<8 | 768<<10
	return units, "b\x00"
}

func TestPrecompiledSmall(t *testing.T) {
	units, repl := oneKey()
	p, err := parsePrecompiled(charsmap(units, repl), "charsmap")
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"":                    "",
		"xyz":                 "xyz",
		"a":                   "b",
		"cat":                 "cbt",
		"a\u0301":             "b",                   // one cluster, replaced whole
		"a\u0301\u0302\u0303": "b\u0301\u0302\u0303", // 7 bytes: by character
		"\u0301a":             "\u0301b",
		"\x00a":               "\x00b",
	} {
		if got := p.normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPrecompiledLongOffset reads a unit whose offset is given in units of
// 256 (bit 9 set), as Darts-clone writes offsets of 2^21 and more.
func TestPrecompiledLongOffset(t *testing.T) {
	units, repl := oneKey()
	units[256^'a'] = 'a' | 1<<8 | 1<<9 | 3<<10 // offset 3<<8 = 768
	p, err := parsePrecompiled(charsmap(units, repl), "charsmap")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.normalize("cat"); got != "cbt" {
		t.Errorf("normalize(cat) = %q", got)
	}
}

func TestGraphemeClusters(t *testing.T) {
	split := func(s string) []string {
		var out []string
		for s != "" {
			n := nextGrapheme(s)
			out = append(out, s[:n])
			s = s[n:]
		}
		return out
	}
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"abc", []string{"a", "b", "c"}},
		{"\r\n\n\r", []string{"\r\n", "\n", "\r"}},
		{"e\u0301\u0302x", []string{"e\u0301\u0302", "x"}},
		{"\u1100\u1161\u11a8\uac00\u11a8", []string{"\u1100\u1161\u11a8", "\uac00\u11a8"}},
		{"\U0001F1EB\U0001F1F7\U0001F1E9", []string{"\U0001F1EB\U0001F1F7", "\U0001F1E9"}},
		{"\U0001F469\u200D\U0001F52C!", []string{"\U0001F469\u200D\U0001F52C", "!"}},
		{"a\u200D\U0001F52C", []string{"a\u200D", "\U0001F52C"}},
		{"\u0915\u094D\u0937\u093F", []string{"\u0915\u094D\u0937\u093F"}},
		{"\u0915\u0937", []string{"\u0915", "\u0937"}},
		{"\u0600\u0661", []string{"\u0600\u0661"}},
		{"\u0600\n", []string{"\u0600", "\n"}},
		{"a\u0903", []string{"a\u0903"}},
	} {
		if got := split(c.in); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("clusters of %+q: %+q, want %+q", c.in, got, c.want)
		}
	}
}
