package generate_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/nn"
)

// Tokens drives a model from token ids. The model is a parity case's tiny
// llama (random weights, 256 tokens of vocabulary).
func ExampleTokens() {
	m, err := registry.Load("../testdata/parity/llama/base/model", nn.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Free()
	ctx := context.Background()
	draw := func(s generate.Sampling) []int32 {
		var ids []int32
		st, err := generate.Tokens(ctx, m, []int32{1, 17, 42, 99}, generate.Options{Sampling: s, MaxTokens: 8},
			func(id int32) error {
				ids = append(ids, id)
				return nil
			})
		if err != nil {
			fmt.Println(err)
		}
		fmt.Println(st.Finish, st.PromptTokens, st.Tokens)
		return ids
	}
	a := draw(generate.Sampling{Temp: 0.8, Seed: 42})
	b := draw(generate.Sampling{Temp: 0.8, Seed: 42})
	fmt.Println("the same seed draws the same tokens:", slices.Equal(a, b))
	// Output:
	// length 4 8
	// length 4 8
	// the same seed draws the same tokens: true
}
