package tokenizer

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

// TestConcurrentUse encodes and decodes from several goroutines at once
// (run with -race to check the BPE and Unigram caches and the regular
// expressions).
func TestConcurrentUse(t *testing.T) {
	dir, err := reftest.Unigram()
	if err != nil {
		t.Fatal(err)
	}
	xlmr, err := LoadFile(filepath.Join(dir, "xlmr", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, tk := range map[string]*Tokenizer{"qwen3": loadNpm(t, "qwen3"), "xlmr": xlmr} {
		t.Run(name, func(t *testing.T) {
			texts := []string{"Hello, world! 你好", "<|im_start|>user\nhi<|im_end|> <s>x</s>", strings.Repeat("ab cd ", 50), "😀 emoji 👍🏽 ＡＢＣ"}
			want := make([][]int32, len(texts))
			wantText := make([]string, len(texts))
			for i, s := range texts {
				want[i] = tk.Encode(s, false)
				wantText[i] = tk.Decode(want[i], false)
			}
			var wg sync.WaitGroup
			errs := make(chan string, 64)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range 50 {
						i := (g + k) % len(texts)
						got := tk.Encode(texts[i], false)
						if !equalIDs(got, want[i]) {
							errs <- "Encode(" + texts[i] + ") differs"
							return
						}
						if tk.Decode(got, false) != wantText[i] {
							errs <- "Decode differs for " + texts[i]
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			if name == "qwen3" {
				for i, s := range texts {
					if wantText[i] != s {
						t.Errorf("Decode(Encode(%q)) = %q", s, wantText[i])
					}
				}
			}
		})
	}
}
