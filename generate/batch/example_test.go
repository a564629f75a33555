package batch_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/archgen/archgen/generate/batch"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/nn"
)

// Three requests on one model, decoded together: each reads its own
// stream. (The model is the parity tests' tiny llama; its token ids stand
// for a tokenizer's.)
func Example() {
	m, err := registry.Load("../../testdata/parity/llama/base/model", nn.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Free()
	e, err := batch.New(m, batch.Options{MaxBatch: 16, PromptCacheBytes: 64 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	prompts := [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8}, {9}}
	out := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		events, err := e.Submit(context.Background(), batch.Request{Prompt: p, MaxTokens: 4})
		if err != nil {
			fmt.Println(err)
			return
		}
		wg.Go(func() {
			var ids []int32
			for ev := range events {
				if ev.Done {
					out[i] = fmt.Sprintf("prompt of %d: %d tokens, finish %s", ev.PromptTokens, len(ids), ev.Finish)
					continue
				}
				ids = append(ids, ev.Token) // a detokenizer would take them here
			}
		})
	}
	wg.Wait()
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// prompt of 3: 4 tokens, finish length
	// prompt of 5: 4 tokens, finish length
	// prompt of 1: 4 tokens, finish length
}
