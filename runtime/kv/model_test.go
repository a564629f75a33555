package kv_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
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
	for _, c := range []struct{ arch, cas string }{{"llama", "sliding"}, {"llama", "base"}, {"gemma2", "capped"}, {"gemma4_text", "shared_kv"}, {"gemma4_text", "per_layer_inputs"}} {
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

// TestCacheDtype: a model computing in float32 on a half-precision
// checkpoint (bfloat16 or float16 weights, or a quantized one's scales)
// holds its keys and values in that dtype by default, in its growing and
// window caches alike: half the bytes of float32 caches, and logits close
// to theirs (not equal: the keys and values are rounded). Asked for
// float32 caches, or for the checkpoint's own arithmetic, or on a float32
// checkpoint, or in a model that routes to experts, it holds what it
// computes.
func TestCacheDtype(t *testing.T) {
	scalesDtype := func(level string) mlx.Dtype {
		arrays, _, err := mlx.LoadSafetensors(filepath.Join("../../out/parity/llama/sliding", level, "model.safetensors"), nil)
		if err != nil {
			t.Fatalf("%v (make parity-models derives it)", err)
		}
		dt := mlx.Dtype(0)
		for name, a := range arrays {
			if strings.HasSuffix(name, ".scales") {
				dt = a.Dtype()
			}
			a.Free()
		}
		return dt
	}
	held := func(t *testing.T, caches []kv.Cache) mlx.Dtype {
		t.Helper()
		dt := mlx.Dtype(0)
		for i, c := range caches {
			st, ok := c.(interface{ State() []*mlx.Array })
			if !ok || (len(st.State()) != 2 && len(st.State()) != 6) {
				t.Fatalf("layer %d: a %T holding %d arrays, want a dense or quantized cache", i, c, len(st.State()))
			}
			arrs := st.State()
			if len(arrs) == 6 {
				arrs = []*mlx.Array{arrs[1], arrs[2], arrs[4], arrs[5]} // scales and biases
			}
			for _, a := range arrs {
				if dt != 0 && a.Dtype() != dt {
					t.Fatalf("layer %d holds %s beside %s", i, a.Dtype(), dt)
				}
				dt = a.Dtype()
			}
		}
		return dt
	}
	bytes := func(caches []kv.Cache) int {
		n := 0
		for _, c := range caches {
			n += c.Nbytes()
		}
		return n
	}
	// decodeAll runs seq's prompt then decodes the rest a token at a time,
	// returning every step's logits.
	decodeAll := func(t *testing.T, m nn.Model, caches []kv.Cache) []float32 {
		t.Helper()
		var out []float32
		for _, l := range run(t, m, caches, seq[:prompt]) {
			out = append(out, l...)
		}
		for _, tok := range seq[prompt:] {
			out = append(out, run(t, m, caches, []int32{tok})[0]...)
		}
		return out
	}
	for _, c := range []struct {
		arch, cas, level string
		dtype            mlx.Dtype // the compute dtype asked for
		kvBits           int       // in groups of 32
		want             mlx.Dtype
	}{
		{"llama", "sliding", "bfloat16", 0, 0, mlx.BFloat16},
		{"llama", "sliding", "float16", 0, 0, mlx.Float16},
		{"llama", "sliding", "q4_g64", 0, 0, scalesDtype("q4_g64")},
		{"llama", "sliding", "float32", 0, 0, mlx.Float32},
		{"llama", "sliding", "bfloat16", nn.CheckpointDtype, 0, mlx.BFloat16},
		{"llama", "sliding", "float16", mlx.Float32, 0, mlx.Float16},
		{"llama", "base", "bfloat16", 0, 8, mlx.BFloat16},
		{"qwen3_moe", "base", "bfloat16", 0, 0, mlx.Float32},
	} {
		compute := map[mlx.Dtype]string{0: "default", nn.CheckpointDtype: "checkpoint"}[c.dtype]
		if compute == "" {
			compute = c.dtype.String()
		}
		t.Run(fmt.Sprintf("%s_%s_%s_%s_kv%d", c.arch, c.cas, c.level, compute, c.kvBits), func(t *testing.T) {
			m := loadLevel(t, c.arch, c.cas+"/"+c.level, c.dtype)
			if got := m.Info().CacheDtype; (got == 0) != (c.want == mlx.Float32 || c.dtype == nn.CheckpointDtype) {
				t.Errorf("Info().CacheDtype %s, holding %s", got, c.want)
			}
			opts := kv.Options{KVBits: c.kvBits}
			if c.kvBits > 0 {
				opts.KVGroupSize = 32
			}
			caches, err := m.NewCachesWith(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer freeAll(caches)
			got := decodeAll(t, m, caches)
			if dt := held(t, caches); dt != c.want {
				t.Fatalf("the caches hold %s, want %s", dt, c.want)
			}
			opts.Dtype = mlx.Float32
			wide, err := m.NewCachesWith(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer freeAll(wide)
			want := decodeAll(t, m, wide)
			if c.dtype == nn.CheckpointDtype {
				// computed in bfloat16: float32 caches widen them, and the
				// attention then runs in float32 (libmlx promotes)
				return
			}
			if dt := held(t, wide); dt != mlx.Float32 {
				t.Fatalf("asked for float32 caches, they hold %s", dt)
			}
			if c.want == mlx.Float32 {
				if bytes(caches) != bytes(wide) {
					t.Fatalf("float32 caches of %d and %d bytes", bytes(caches), bytes(wide))
				}
				return
			}
			switch {
			case c.kvBits == 0 && 2*bytes(caches) != bytes(wide):
				t.Fatalf("the %s caches take %d bytes, float32 ones %d", c.want, bytes(caches), bytes(wide))
			case c.kvBits > 0 && bytes(caches) >= bytes(wide):
				// the packed values alike, the scales and biases halved
				t.Fatalf("the quantized caches with %s scales take %d bytes, with float32 ones %d", c.want, bytes(caches), bytes(wide))
			}
			scale, diff := 0.0, 0.0
			for i := range want {
				scale = math.Max(scale, math.Abs(float64(want[i])))
				diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
			}
			t.Logf("logits over %s caches within %.3g of float32 caches' (scale %.3g)", c.want, diff, scale)
			if diff == 0 || diff > 0.02*scale {
				t.Fatalf("logits over %s caches differ by %g from float32 caches' (scale %g): want a rounding's worth", c.want, diff, scale)
			}
		})
	}
}
