package archgen_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/archgen/archgen"
)

// Chat with a model and stream its answer. The checkpoint is the real
// SmolLM2-135M-Instruct GGUF that `make models` fetches; greedy decoding
// makes the answer reproducible.
func Example() {
	ctx := context.Background()
	m, err := archgen.Load(ctx, ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf", archgen.LoadOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Free()
	msgs := []archgen.Message{{Role: "user", Content: "What is the capital of France? Answer in one sentence."}}
	res, err := m.Chat(ctx, msgs, archgen.Options{MaxTokens: 40}, func(s string) error {
		fmt.Print(s)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("\n[%s]\n", res.Finish)
	// Output:
	// The capital of France is Paris.
	// [stop]
}

// Load resolves a model directory, a GGUF file or a Hugging Face repo id;
// the model comes with its tokenizer, chat template and stop set.
func ExampleLoad() {
	m, err := archgen.Load(context.Background(), tinyDir, archgen.LoadOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Free()
	fmt.Println(m.Source.Kind, m.Net.Info().Arch, m.Net.Info().VocabSize)
	fmt.Println("stop tokens:", m.StopTokens)
	fmt.Println("chat template:", m.Template != nil)
	// Output:
	// dir llama 256
	// stop tokens: [253]
	// chat template: true
}

// Chat renders the conversation with the model's chat template and
// generates the assistant's turn. The tiny checkpoint's weights are random,
// so only the counts are shown; its tokenizer has a token per byte, so the
// prompt's 45 tokens are the template's 39 bytes and 6 special tokens.
func ExampleModel_Chat() {
	ctx := context.Background()
	m, err := archgen.Load(ctx, tinyDir, archgen.LoadOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Free()
	res, err := m.Chat(ctx, []archgen.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Hello!"},
	}, archgen.Options{MaxTokens: 8}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Finish, res.PromptTokens, res.Tokens)
	// Output:
	// length 45 8
}

// A Session keeps the KV cache between turns: the second turn processes
// only the tokens after the first.
func ExampleSession() {
	ctx := context.Background()
	m, err := archgen.Load(ctx, tinyDir, archgen.LoadOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Free()
	s, err := m.NewSession(archgen.Options{}.KV)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Free()
	msgs := []archgen.Message{{Role: "user", Content: "abc"}}
	opts := archgen.Options{MaxTokens: 4}
	first, _ := s.Chat(ctx, msgs, opts, nil)
	msgs = append(msgs, archgen.Message{Role: "assistant", Content: first.Text}, archgen.Message{Role: "user", Content: "def"})
	second, _ := s.Chat(ctx, msgs, opts, nil)
	fmt.Println("first turn:", first.PromptTokens, "prompt tokens,", first.Processed(), "processed")
	fmt.Println("second turn reuses the first's prompt:", second.CachedTokens >= first.PromptTokens)
	// Output:
	// first turn: 23 prompt tokens, 23 processed
	// second turn reuses the first's prompt: true
}

// Generate continues a plain prompt, without the chat template; the
// tokenizer adds its BOS token unless the prompt starts with it.
func ExampleModel_Generate() {
	ctx := context.Background()
	m, err := archgen.Load(ctx, tinyDir, archgen.LoadOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Free()
	res, err := m.Generate(ctx, "Once upon a time", archgen.Options{MaxTokens: 5, StopStrings: []string{"\n"}}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.PromptTokens, res.Tokens <= 5)
	// Output:
	// 17 true
}

// StopTokens merges config.json's and generation_config.json's
// eos_token_id with the tokenizer's, as mlx-lm does: gemma-2's instruction
// checkpoints list <eos> and <end_of_turn>.
func ExampleStopTokens() {
	config := []byte(`{"model_type": "gemma2", "eos_token_id": [1, 107]}`)
	ids, err := archgen.StopTokens(config, nil, 1)
	fmt.Println(ids, err)
	// generation_config.json's list, when it has one, replaces config.json's.
	ids, err = archgen.StopTokens(config, []byte(`{"eos_token_id": [1, 106]}`), 1)
	fmt.Println(ids, err)
	// Output:
	// [1 107] <nil>
	// [1 106] <nil>
}

// Resolve finds a repo id in the Hugging Face cache, offline.
func ExampleResolve() {
	_, err := archgen.Resolve("no-such-org/no-such-model")
	fmt.Println(strings.Contains(err.Error(), "does not download"))
	_ = os.Getenv("HF_HOME") // where the cache lives, as huggingface_hub reads it
	// Output:
	// true
}
