package tokenizer

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// TestTokenBytes: each token's bytes, joined, are the text's UTF-8 bytes,
// also where a character spans several tokens (byte-fallback tokens in
// llama2, byte-level pieces in gpt2), whose Decode alone is U+FFFD; a
// whole token's bytes are its Decode; and in gpt2's byte-level vocabulary
// no two ids have the same bytes, so bytes name the id.
func TestTokenBytes(t *testing.T) {
	text := "x𐍈🦙 a😀b"
	for _, name := range []string{"llama2", "gpt2"} {
		t.Run(name, func(t *testing.T) {
			tk := loadNpm(t, name)
			ids := tk.Encode(text, false)
			var joined []byte
			partial := 0
			for _, id := range ids {
				b := tk.TokenBytes(id)
				joined = append(joined, b...)
				if d := tk.Decode([]int32{id}, false); utf8.Valid(b) {
					if d != string(b) {
						t.Errorf("id %d: bytes %q, Decode %q", id, b, d)
					}
				} else {
					partial++
					if d != "\uFFFD" && !utf8.ValidString(d) {
						t.Errorf("id %d: Decode %q of a partial character", id, d)
					}
				}
			}
			if partial == 0 {
				t.Fatalf("no token of %q holds part of a character: the test checks nothing", text)
			}
			// Each token's bytes as Decode has it alone (llama2's decoder
			// drops a word's leading space there), so the spaces aside.
			if got, want := bytes.ReplaceAll(joined, []byte(" "), nil), bytes.ReplaceAll([]byte(text), []byte(" "), nil); !bytes.Equal(got, want) {
				t.Errorf("joined bytes %q, want %q", got, want)
			}
			if tk.TokenBytes(int32(tk.VocabSize())+5) != nil {
				t.Errorf("an id past the vocabulary has bytes")
			}
		})
	}
	tk := loadNpm(t, "gpt2")
	seen := map[string]int32{}
	for id := int32(0); id < int32(tk.VocabSize()); id++ {
		b := string(tk.TokenBytes(id))
		if prev, ok := seen[b]; ok {
			t.Fatalf("ids %d and %d both have bytes %q", prev, id, b)
		}
		seen[b] = id
	}
}
