package generate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/nn"
)

// A parity case's float32 checkpoint (made by mlx-lm; see parity/refgen).
const modelDir = "../testdata/parity/llama/base/model"

func python(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../.deps/py/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	return p
}

type spec struct {
	Name              string  `json:"name"`
	Prompt            []int32 `json:"prompt"`
	MaxTokens         int     `json:"max_tokens"`
	Seed              uint64  `json:"seed"`
	Temp              float64 `json:"temp"`
	TopP              float64 `json:"top_p"`
	MinP              float64 `json:"min_p"`
	MinTokensToKeep   int     `json:"min_tokens_to_keep"`
	TopK              int     `json:"top_k"`
	RepetitionPenalty float64 `json:"repetition_penalty"`
	RepetitionContext int     `json:"repetition_context_size"`
}

func (s spec) options() Options {
	return Options{
		MaxTokens: s.MaxTokens,
		Sampling: Sampling{Temp: s.Temp, TopP: s.TopP, MinP: s.MinP, MinTokensToKeep: s.MinTokensToKeep,
			TopK: s.TopK, RepetitionPenalty: s.RepetitionPenalty, RepetitionContext: s.RepetitionContext, Seed: s.Seed},
	}
}

// TestSamplingMatchesMLXLM draws with each sampling knob and the same seed
// as mlx-lm's generate_step, on the same checkpoint, and expects the very
// same tokens.
func TestSamplingMatchesMLXLM(t *testing.T) {
	prompt := []int32{145, 157, 5, 166, 84, 81, 236, 215, 36, 117, 32, 24}
	base := spec{Prompt: prompt, MaxTokens: 24, MinTokensToKeep: 1, RepetitionContext: 20}
	with := func(name string, f func(*spec)) spec {
		s := base
		s.Name = name
		f(&s)
		return s
	}
	specs := []spec{
		with("greedy", func(s *spec) {}),
		with("temp", func(s *spec) { s.Temp, s.Seed = 0.9, 7 }),
		with("top_p", func(s *spec) { s.Temp, s.TopP, s.Seed = 1.0, 0.8, 11 }),
		with("min_p", func(s *spec) { s.Temp, s.MinP, s.MinTokensToKeep, s.Seed = 1.2, 0.1, 3, 5 }),
		with("top_k", func(s *spec) { s.Temp, s.TopK, s.Seed = 1.0, 5, 3 }),
		with("all", func(s *spec) { s.Temp, s.TopP, s.MinP, s.TopK, s.Seed = 0.7, 0.95, 0.05, 40, 1 }),
		with("repetition", func(s *spec) { s.RepetitionPenalty, s.RepetitionContext = 1.3, 8 }),
		with("repetition_sampled", func(s *spec) { s.Temp, s.RepetitionPenalty, s.Seed = 0.8, 1.5, 9 }),
	}
	dir := t.TempDir()
	specPath := filepath.Join(dir, "spec.json")
	b, _ := json.Marshal(specs)
	os.WriteFile(specPath, b, 0o644)
	outPath := filepath.Join(dir, "out.json")
	if out, err := exec.Command(python(t), "testdata/mlxlm_generate.py", modelDir, outPath, specPath).CombinedOutput(); err != nil {
		t.Fatalf("mlx-lm: %v\n%s", err, out)
	}
	var want map[string][]int32
	b, _ = os.ReadFile(outPath)
	require.NoError(t, json.Unmarshal(b, &want))
	// The knobs must matter on this checkpoint, or matching would prove little.
	for _, s := range specs[1:] {
		if len(want[s.Name]) != s.MaxTokens || slices.Equal(want[s.Name], want["greedy"]) {
			t.Fatalf("mlx-lm's %s tokens %v are greedy's %v", s.Name, want[s.Name], want["greedy"])
		}
	}
	m, err := registry.Load(modelDir, nn.Options{})
	require.NoError(t, err)
	defer m.Free()
	for _, s := range specs {
		t.Run(s.Name, func(t *testing.T) {
			var got []int32
			st, err := Tokens(context.Background(), m, s.Prompt, s.options(), func(id int32) error {
				got = append(got, id)
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, want[s.Name], got, "tokens, against mlx-lm's")
			assert.Equal(t, s.MaxTokens, st.Tokens)
			assert.Equal(t, FinishLength, st.Finish)
			assert.Equal(t, len(s.Prompt), st.PromptTokens)
		})
	}
}

func TestStopsAndErrors(t *testing.T) {
	m, err := registry.Load(modelDir, nn.Options{})
	require.NoError(t, err)
	defer m.Free()
	prompt := []int32{145, 157, 5, 166}
	var all []int32
	collect := func(id int32) error { all = append(all, id); return nil }
	_, err = Tokens(context.Background(), m, prompt, Options{MaxTokens: 12}, collect)
	require.NoError(t, err)
	// A stop token ends generation before it.
	var got []int32
	st, err := Tokens(context.Background(), m, prompt, Options{MaxTokens: 12, StopTokens: []int32{all[5]}},
		func(id int32) error { got = append(got, id); return nil })
	if err != nil {
		t.Fatal(err)
	}
	first := slices.Index(all, all[5])
	if !slices.Equal(got, all[:first]) || st.Finish != FinishStop {
		t.Fatalf("with stop token %d: %v (%s), want %v", all[5], got, st.Finish, all[:first])
	}
	// A callback's ErrStopped stops; another error aborts with it.
	n := 0
	st, err = Tokens(context.Background(), m, prompt, Options{MaxTokens: 12}, func(int32) error {
		n++
		if n == 3 {
			return ErrStopped
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, st.Tokens)
	assert.Equal(t, FinishStop, st.Finish)
	boom := errors.New("boom")
	_, err = Tokens(context.Background(), m, prompt, Options{MaxTokens: 12}, func(int32) error { return boom })
	assert.ErrorIs(t, err, boom)
	// Cancellation mid-way.
	ctx, cancel := context.WithCancel(context.Background())
	n = 0
	st, err = Tokens(ctx, m, prompt, Options{MaxTokens: 100}, func(int32) error {
		n++
		if n == 4 {
			cancel()
		}
		return nil
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, FinishCancelled, st.Finish)
	assert.Equal(t, 4, st.Tokens)
	// Bad input.
	for _, c := range []struct {
		prompt []int32
		opts   Options
		want   string
	}{
		{nil, Options{}, "empty prompt"},
		{[]int32{1, 999}, Options{Vocab: 256}, "prompt token 999 (position 1) is outside the vocabulary of 256"},
		{prompt, Options{Sampling: Sampling{Temp: -1}}, "temperature -1 must be finite and >= 0"},
		{prompt, Options{Sampling: Sampling{TopK: 300}, Vocab: 256}, "top-k 300 must be in (0, 256)"},
	} {
		_, err := Tokens(context.Background(), m, c.prompt, c.opts, collect)
		if assert.Error(t, err, "%v %+v", c.prompt, c.opts) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
}
