package tokenizer

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentUse encodes and decodes from several goroutines at once
// (run with -race to check the BPE cache and the regular expressions).
func TestConcurrentUse(t *testing.T) {
	tk := loadNpm(t, "qwen3")
	texts := []string{"Hello, world! 你好", "<|im_start|>user\nhi<|im_end|>", strings.Repeat("ab cd ", 50), "😀 emoji 👍🏽"}
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tk.Encode(s, false)
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
				if tk.Decode(got, false) != texts[i] {
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
}
