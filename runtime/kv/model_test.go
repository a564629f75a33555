package kv_test

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// These tests run the caches inside generated models: parity checkpoints
// made by mlx-lm (see parity/refgen), one with sliding layers whose window
// (6) is shorter than the prompt, and gemma2, whose attention is written out
// by hand over array masks. Decoding with the caches must give the logits a
// single pass over the whole sequence gives.

var seq = []int32{145, 157, 5, 166, 84, 81, 236, 215, 36, 117, 32, 24, 68, 39, 124, 95, 40, 185, 130, 43, 7, 99}

const prompt = 12 // the rest is decoded one token at a time, wrapping the windows' rings

func load(t *testing.T, arch, cas string) nn.Model {
	t.Helper()
	m, err := registry.Load(filepath.Join("../../testdata/parity", arch, cas, "model"), nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	return m
}

// full is the logits of every position of seq in one pass, [len(seq)][vocab].
func full(t *testing.T, m nn.Model) [][]float32 {
	t.Helper()
	caches := m.NewCaches()
	defer freeAll(caches)
	return run(t, m, caches, seq)
}

// run feeds tokens through caches in one call and returns each position's logits.
func run(t *testing.T, m nn.Model, caches []kv.Cache, tokens []int32) [][]float32 {
	t.Helper()
	g := mlx.NewGraph(nil)
	defer g.Close()
	logits := g.AsType(m.Forward(g, mlx.FromSlice(g, tokens, 1, len(tokens)), caches), mlx.Float32)
	if err := g.Eval(logits); err != nil {
		t.Fatal(err)
	}
	v, err := logits.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	vocab := len(v) / len(tokens)
	out := make([][]float32, len(tokens))
	for i := range out {
		out[i] = v[i*vocab : (i+1)*vocab]
	}
	return out
}

func freeAll(caches []kv.Cache) {
	for _, c := range caches {
		c.Free()
	}
}

// same checks that got matches want to float32 rounding, relative to the
// logits' scale.
func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	scale, diff := 0.0, 0.0
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
	}
	if diff > 1e-4*scale {
		t.Fatalf("%s: logits differ by %g (scale %g)", what, diff, scale)
	}
}

// decode feeds tokens one at a time and checks each step against the full
// pass at position from+i.
func decode(t *testing.T, m nn.Model, caches []kv.Cache, want [][]float32, from int, tokens []int32) {
	t.Helper()
	for i, tok := range tokens {
		got := run(t, m, caches, []int32{tok})
		same(t, "decode step at position "+itoa(from+i), got[0], want[from+i])
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestModelDecodeEqualsRecompute(t *testing.T) {
	for _, c := range []struct{ arch, cas string }{{"llama", "sliding"}, {"llama", "base"}, {"gemma2", "capped"}} {
		t.Run(c.arch+"/"+c.cas, func(t *testing.T) {
			m := load(t, c.arch, c.cas)
			want := full(t, m)

			t.Run("prefill_then_decode", func(t *testing.T) {
				caches := m.NewCaches()
				defer freeAll(caches)
				got := run(t, m, caches, seq[:prompt])
				for i := range got {
					same(t, "prefill position "+itoa(i), got[i], want[i])
				}
				decode(t, m, caches, want, prompt, seq[prompt:])
			})

			t.Run("trim_then_redecode", func(t *testing.T) {
				caches := m.NewCaches()
				defer freeAll(caches)
				run(t, m, caches, seq[:prompt])
				decode(t, m, caches, want, prompt, seq[prompt:prompt+3])
				for i, c := range caches {
					if !c.Trimmable() {
						// A window cache past its size cannot take positions
						// back, as in mlx-lm (whose trim_prompt_cache then
						// trims nothing): it must refuse and stay as it is.
						off := c.Offset()
						if n := c.Trim(3); n != 0 || c.Offset() != off {
							t.Fatalf("layer %d: an untrimmable cache trimmed %d positions", i, n)
						}
						decode(t, m, caches, want, prompt+3, seq[prompt+3:])
						return
					}
				}
				for _, c := range caches {
					if n := c.Trim(3); n != 3 {
						t.Fatalf("trimmed %d positions, want 3", n)
					}
				}
				decode(t, m, caches, want, prompt, seq[prompt:])
			})

			t.Run("save_load_continue", func(t *testing.T) {
				caches := m.NewCaches()
				run(t, m, caches, seq[:prompt])
				p := filepath.Join(t.TempDir(), "prompt.safetensors")
				if err := kv.Save(p, caches, map[string]string{"case": c.cas}); err != nil {
					t.Fatal(err)
				}
				freeAll(caches)
				loaded, meta, err := kv.Load(p)
				if err != nil {
					t.Fatal(err)
				}
				defer freeAll(loaded)
				if meta["case"] != c.cas || len(loaded) != len(caches) {
					t.Fatalf("loaded %d caches, metadata %v", len(loaded), meta)
				}
				decode(t, m, loaded, want, prompt, seq[prompt:])
			})
		})
	}
}
