package generate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// The fault tests of generation: docs/FAILURES.md lists them.

func loadModel(t *testing.T, dir string) nn.Model {
	t.Helper()
	m, err := registry.Load(dir, nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	return m
}

var faultPrompt = []int32{145, 157, 5, 166, 84, 81, 236, 215, 36, 117, 32, 24}

// TestVocabularyFromModel: without Options.Vocab, a model's own vocabulary
// bounds the prompt (an id past it would index outside the embedding).
func TestVocabularyFromModel(t *testing.T) {
	m := loadModel(t, modelDir)
	for _, c := range []struct {
		prompt []int32
		want   string
	}{
		{[]int32{1, 256}, "generate: prompt token 256 (position 1) is outside the vocabulary of 256"},
		{[]int32{-3}, "generate: prompt token -3 (position 0) is outside the vocabulary of 256"},
		{[]int32{}, "generate: empty prompt: at least one token is needed"},
	} {
		_, err := Tokens(context.Background(), m, c.prompt, Options{}, func(int32) error { return nil })
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: %v; want %s", c.prompt, err, c.want)
		}
	}
	if _, err := Tokens(context.Background(), m, faultPrompt, Options{Sampling: Sampling{Temp: 1, TopK: 256}}, func(int32) error { return nil }); err == nil ||
		err.Error() != "generate: top-k 256 must be in (0, 256)" {
		t.Errorf("top-k of the whole vocabulary: %v", err)
	}
}

// TestCancelled: a context cancelled before the prompt is processed ends
// generation at once, without a token.
func TestCancelled(t *testing.T) {
	m := loadModel(t, modelDir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	st, err := Tokens(ctx, m, faultPrompt, Options{MaxTokens: 10}, func(int32) error { n++; return nil })
	if !errors.Is(err, context.Canceled) || st.Finish != FinishCancelled || n != 0 {
		t.Fatalf("cancelled before the start: %v, %+v, %d tokens", err, st, n)
	}
}

// TestMemoryLimit: generation with a memory limit stops with
// ErrMemoryLimit once MLX holds more, and says how much.
func TestMemoryLimit(t *testing.T) {
	m := loadModel(t, modelDir)
	const steps = 600
	// The same generation unbounded: what MLX held at each token.
	var held []uint64
	if _, err := Tokens(context.Background(), m, faultPrompt, Options{MaxTokens: steps}, func(int32) error {
		held = append(held, mlx.ActiveMemory())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The plain caches grow by a buffer every 256 positions, and what MLX
	// holds at a token also varies by the arrays of the steps in flight: a
	// limit halfway between the most held over the first 100 tokens and
	// the most over the last 100 is passed after the start and before the
	// end.
	start, end := slices.Max(held[:100]), slices.Max(held[steps-100:])
	if end <= start {
		t.Fatalf("held at most %d bytes over the first 100 tokens and %d over the last: no growth to stop", start, end)
	}
	limit := start + (end-start)/2
	n := 0
	st, err := Tokens(context.Background(), m, faultPrompt, Options{MaxTokens: steps, MemoryLimit: limit}, func(int32) error {
		n++
		return nil
	})
	if !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("error %v, want ErrMemoryLimit", err)
	}
	prefix := "generate: memory limit reached: MLX holds "
	suffix := fmt.Sprintf(" bytes after generating %d tokens, more than the limit of %d bytes", n, limit)
	if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.HasSuffix(msg, suffix) {
		t.Fatalf("error %q, want %q...%q", msg, prefix, suffix)
	}
	if n == 0 || n >= steps || st.Tokens != n {
		t.Fatalf("stopped after %d tokens (stats %d) of %d", n, st.Tokens, steps)
	}
	// A limit the prompt alone passes stops before any token.
	n = 0
	_, err = Tokens(context.Background(), m, faultPrompt, Options{MemoryLimit: 1}, func(int32) error { n++; return nil })
	if !errors.Is(err, ErrMemoryLimit) || n != 0 || !strings.Contains(err.Error(), "after the prompt's first 11 tokens") {
		t.Fatalf("limit of 1 byte: %v after %d tokens", err, n)
	}
}

// TestDecodeMemoryFlat decodes 10,000 tokens with rotating caches of 64
// positions, which stop growing once full: what MLX holds must then stay
// where it was after the warm-up, less the caches' own bytes.
func TestDecodeMemoryFlat(t *testing.T) {
	m := loadModel(t, modelDir)
	const steps = 10000
	caches, err := m.NewCachesWith(kv.Options{MaxKVSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	cacheBytes := func() int64 {
		n := 0
		for _, c := range caches {
			n += c.Nbytes()
		}
		return int64(n)
	}
	// What MLX holds is sampled after every token, while the next step may
	// still be in flight, so single readings carry that step's transient
	// buffers (their size depends on which kernels run). A leak raises the
	// floor instead: the least reading of the last thousand tokens is held
	// to that of the thousand after the warm-up.
	const window = 1000
	first, last := int64(1<<62), int64(1<<62)
	var hi int64
	i := 0
	st, err := Tokens(context.Background(), m, faultPrompt, Options{MaxTokens: steps, Caches: caches}, func(int32) error {
		i++
		held := int64(mlx.ActiveMemory()) - cacheBytes()
		switch {
		case i > 300 && i <= 300+window:
			first = min(first, held)
		case i > steps-window:
			last = min(last, held)
		}
		if i > 300 {
			hi = max(hi, held)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Tokens != steps {
		t.Fatalf("%d tokens, want %d", st.Tokens, steps)
	}
	t.Logf("%d tokens: active memory less the caches' %d bytes: least %d over tokens 301-%d, %d over the last %d; most %d",
		steps, cacheBytes(), first, 300+window, last, window, hi)
	// A buffer kept per step would raise the floor by megabytes by the
	// end; 16 KiB over 8,700 steps is under 2 bytes a step.
	if d := last - first; d > 16<<10 || d < -16<<10 {
		t.Fatalf("the floor of memory beyond the caches moved by %d bytes from tokens 301-%d to the last %d", d, 300+window, window)
	}
	// A step's transients are kilobytes here; a megabyte would be a step
	// that keeps what it should free.
	if hi-first > 1<<20 {
		t.Fatalf("memory beyond the caches reached %d bytes above its floor of %d", hi-first, first)
	}
}

// TestConcurrentGeneration: goroutines generating with one loaded model,
// each with its own caches and graphs (some on their own streams), get
// the tokens one generation alone gets. go test -race checks the sharing.
func TestConcurrentGeneration(t *testing.T) {
	m := loadModel(t, modelDir)
	const n = 24
	var want []int32
	if _, err := Tokens(context.Background(), m, faultPrompt, Options{MaxTokens: n}, func(id int32) error {
		want = append(want, id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([][]int32, 6)
	errs := make([]error, len(got))
	for w := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var opts Options
			opts.MaxTokens = n
			if w%2 == 1 {
				s, err := mlx.NewStream(mlx.Device{Type: mlx.CPU})
				if err != nil {
					errs[w] = err
					return
				}
				opts.Stream = s
			}
			for range 3 {
				got[w] = got[w][:0]
				if _, err := Tokens(context.Background(), m, faultPrompt, opts, func(id int32) error {
					got[w] = append(got[w], id)
					return nil
				}); err != nil {
					errs[w] = err
					return
				}
				if !slices.Equal(got[w], want) {
					return
				}
			}
		}()
	}
	wg.Wait()
	for w := range got {
		if errs[w] != nil {
			t.Errorf("goroutine %d: %v", w, errs[w])
		} else if !slices.Equal(got[w], want) {
			t.Errorf("goroutine %d: tokens %v, alone %v", w, got[w], want)
		}
	}
}

// TestPastMaxPositions: a context longer than max_position_embeddings is
// accepted, as mlx-lm accepts it (the rope extrapolates), and gives the
// tokens mlx-lm gives on the same checkpoint.
func TestPastMaxPositions(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"model.safetensors", "model.safetensors.index.json"} {
		b, err := os.ReadFile(filepath.Join(modelDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(modelDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["max_position_embeddings"] = 16
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := spec{Name: "past", Prompt: faultPrompt, MaxTokens: 40, MinTokensToKeep: 1, RepetitionContext: 20}
	specPath := filepath.Join(dir, "spec.json")
	sb, _ := json.Marshal([]spec{s})
	os.WriteFile(specPath, sb, 0o644)
	outPath := filepath.Join(dir, "out.json")
	if out, err := exec.Command(python(t), "testdata/mlxlm_generate.py", dir, outPath, specPath).CombinedOutput(); err != nil {
		t.Fatalf("mlx-lm: %v\n%s", err, out)
	}
	var want map[string][]int32
	ob, _ := os.ReadFile(outPath)
	if err := json.Unmarshal(ob, &want); err != nil {
		t.Fatal(err)
	}
	m := loadModel(t, dir)
	var got []int32
	if _, err := Tokens(context.Background(), m, s.Prompt, s.options(), func(id int32) error {
		got = append(got, id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(s.Prompt)+len(got) <= 16 {
		t.Fatalf("only %d positions", len(s.Prompt)+len(got))
	}
	if !slices.Equal(got, want["past"]) {
		t.Fatalf("tokens past max_position_embeddings\n got %v\nwant %v (mlx-lm)", got, want["past"])
	}
}
