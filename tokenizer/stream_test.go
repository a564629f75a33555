package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

func loadNpm(t testing.TB, name string) *Tokenizer {
	t.Helper()
	folder, err := reftest.Folder(name)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := LoadFile(filepath.Join(folder, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestStreamHoldsPartialCharacters feeds the ids of text whose characters
// span several tokens (byte-fallback tokens in llama2, byte-level pieces in
// gpt2) and checks that every chunk is whole characters, that a step
// returns nothing while a character is incomplete, and that each character
// comes out with the step that completes it.
func TestStreamHoldsPartialCharacters(t *testing.T) {
	text := "a😀b 👨‍👩‍👧 𓀀 ꙮ"
	for _, name := range []string{"llama2", "gpt2", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			tk := loadNpm(t, name)
			ids := tk.Encode(text, false)
			st := tk.NewStream(false)
			held := 0
			var out strings.Builder
			for i, id := range ids {
				c := st.Step(id)
				if !utf8.ValidString(c) {
					t.Fatalf("step %d: chunk %q is not valid UTF-8", i, c)
				}
				out.WriteString(c)
				// While the ids so far end mid-character the step returns
				// nothing; once they do not, the stream has returned all
				// they decode to.
				soFar, incomplete := tk.decode(ids[:i+1], false)
				switch {
				case incomplete && c != "":
					t.Fatalf("step %d: the ids so far end mid-character but the step gave %q", i, c)
				case incomplete:
					held++
					if !strings.HasPrefix(soFar, out.String()) {
						t.Fatalf("step %d: stream has %q, Decode of the ids so far %q", i, out.String(), soFar)
					}
				case out.String() != soFar:
					t.Fatalf("step %d: stream has %q, Decode of the ids so far %q", i, out.String(), soFar)
				}
			}
			if out.String() != tk.Decode(ids, false) {
				t.Errorf("stream %q, Decode %q", out.String(), tk.Decode(ids, false))
			}
			if held == 0 {
				t.Errorf("no step held back a partial character; ids %v do not split one", ids)
			}
		})
	}
}

func TestStreamByteTokens(t *testing.T) {
	tk := loadNpm(t, "llama2")
	var ids []int32
	for _, b := range []byte("😀") {
		id, ok := tk.TokenToID(byteName(b))
		if !ok {
			t.Fatalf("no byte token for %#x", b)
		}
		ids = append(ids, id)
	}
	st := tk.NewStream(false)
	for i, id := range ids[:3] {
		if c := st.Step(id); c != "" {
			t.Fatalf("byte %d of 4 gave %q", i+1, c)
		}
	}
	if c := st.Step(ids[3]); c != "😀" {
		t.Fatalf("the fourth byte gave %q, want 😀", c)
	}
	// Two bytes of a character, then the stream ends: Flush gives what
	// Decode gives for them, one U+FFFD per byte token.
	for _, fresh := range []bool{false, true} {
		if fresh {
			st = tk.NewStream(false)
		}
		if c := st.Step(ids[0]) + st.Step(ids[1]); c != "" {
			t.Fatalf("two bytes of four gave %q", c)
		}
		if c, want := st.Flush(), tk.Decode(ids[:2], false); c != want || want != "\uFFFD\uFFFD" {
			t.Errorf("Flush = %q, Decode = %q, want two U+FFFD", c, want)
		}
	}
}

func byteName(b byte) string {
	const hex = "0123456789ABCDEF"
	return "<0x" + string(hex[b>>4]) + string(hex[b&15]) + ">"
}

// TestStreamFirstTokenSpace checks the sentencepiece decoders' leading
// space: the first word comes out without it, the next ones with it.
func TestStreamFirstTokenSpace(t *testing.T) {
	tk := loadNpm(t, "llama2")
	ids := tk.Encode("Hello big world", true)
	var chunks []string
	st := tk.NewStream(true)
	for _, id := range ids {
		if c := st.Step(id); c != "" {
			chunks = append(chunks, c)
		}
	}
	if got := strings.Join(chunks, "|"); got != "Hello| big| world" {
		t.Errorf("chunks %q, want Hello| big| world", got)
	}
}
