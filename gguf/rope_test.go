package gguf

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// factors are Llama3RoPE's divisors for the given parameters (the form
// llama.cpp's converter writes in rope_freqs).
func factors(base float64, dims int, factor, low, high, orig float64) []float32 {
	f := make([]float32, dims/2)
	for i := range f {
		w := 2 * math.Pi * math.Pow(base, float64(2*i)/float64(dims))
		switch {
		case w < orig/high:
			f[i] = 1
		case w > orig/low:
			f[i] = float32(factor)
		default:
			s := (orig/w - low) / (high - low)
			f[i] = float32(1 / ((1-s)/factor + s))
		}
	}
	return f
}

// TestLlama3Scaling: Llama 3.1's and 3.2's rope scaling read back from its
// factors, with the file's original context or without it (any context
// with the matching low and high factors gives the same factors); factors
// of another form refused by name.
func TestLlama3Scaling(t *testing.T) {
	f := factors(500000, 128, 8, 1, 4, 8192)
	for _, orig := range []float64{8192, 32768} {
		rs, err := llama3Scaling(f, 500000, 128, orig)
		if err != nil {
			t.Fatal(err)
		}
		ratio := orig / 8192
		if rs["factor"] != 8.0 || math.Abs(rs["low_freq_factor"].(float64)-ratio) > 1e-4*ratio ||
			math.Abs(rs["high_freq_factor"].(float64)-4*ratio) > 1e-4*ratio || rs["original_max_position_embeddings"] != orig {
			t.Fatalf("context %g: %v, want factor 8, low %g, high %g", orig, rs, ratio, 4*ratio)
		}
		got := factors(500000, 128, 8, rs["low_freq_factor"].(float64), rs["high_freq_factor"].(float64), orig)
		for i := range f {
			if math.Abs(float64(got[i]-f[i])) > 1e-5*float64(f[i]) {
				t.Fatalf("context %g: factor %d is %g, the file's %g", orig, i, got[i], f[i])
			}
		}
	}
	if rs, err := llama3Scaling(factors(500000, 64, 1, 1, 4, 8192), 500000, 64, 8192); rs != nil || err != nil {
		t.Fatalf("factors of 1: %v, %v, want no scaling", rs, err)
	}
	bent := factors(500000, 128, 8, 1, 4, 8192)
	bent[30] *= 1.1
	for _, c := range []struct {
		name string
		f    []float32
		dims int
		want string
	}{
		{"one factor a pair", f[:10], 128, "10 factors for 128 rotated dimensions"},
		{"no blend", factors(500000, 128, 8, 1, 1.0001, 8192), 128, "Llama 3's scaling needs two to be read back"},
		{"another form", bent, 128, "its factors are not Llama 3's rope scaling"},
	} {
		if _, err := llama3Scaling(c.f, 500000, c.dims, 8192); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// TestLongRopeRefuses: a longrope file's factor tensors come as a pair of
// float32 vectors; anything else is refused by name.
func TestLongRopeRefuses(t *testing.T) {
	vec := func(dt mlx.Dtype, shape ...int) tensor {
		a, err := mlx.NewArray(make([]float32, 4), shape...)
		if err != nil {
			t.Fatal(err)
		}
		if dt != mlx.Float32 {
			g := mlx.NewGraph(nil)
			defer g.Close()
			c := g.AsType(a, dt)
			if err := g.Eval(c); err != nil {
				t.Fatal(err)
			}
			g.Keep(c)
			a = c
		}
		return tensor{array: a}
	}
	for _, c := range []struct {
		name   string
		arrays map[string]tensor
		want   string
	}{
		{"long alone", map[string]tensor{ropeLong: vec(mlx.Float32, 4)}, "tensors rope_factors_long.weight and rope_factors_short.weight come together (the file has one)"},
		{"a matrix", map[string]tensor{ropeLong: vec(mlx.Float32, 2, 2), ropeShort: vec(mlx.Float32, 4)}, "tensor rope_factors_long.weight: float32 [2 2], want a float32 vector"},
		{"half precision", map[string]tensor{ropeLong: vec(mlx.Float32, 4), ropeShort: vec(mlx.Float16, 4)}, "tensor rope_factors_short.weight: float16 [4], want a float32 vector"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := longRope(c.arrays, map[string]any{})
			if err == nil || err.Error() != c.want {
				t.Fatalf("error %v, want %s", err, c.want)
			}
		})
	}
}

// TestSlidingLayers: the file's sliding-window pattern, a flag a layer or
// every n-th layer full, in the config's two spellings; anything else is
// refused by name.
func TestSlidingLayers(t *testing.T) {
	k := "olmo2.attention.sliding_window_pattern"
	md := func(v Value) metadata { return metadata{path: "f.gguf", raw: map[string]Value{k: v}} }
	flags := Value{Kind: ValueNumbers, Nums: []float64{1, 1, 1, 0}}
	if got, err := slidingLayers(md(flags), k, 4, "letters"); err != nil || got != "LLLG" {
		t.Fatalf("flags as letters: %v, %v", got, err)
	}
	got, err := slidingLayers(md(Value{Kind: ValueNumber, Num: 2}), k, 4, "types")
	want := []any{"sliding_attention", "full_attention", "sliding_attention", "full_attention"}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("every second full, as types: %v, %v", got, err)
	}
	for _, v := range []Value{{Kind: ValueNumbers, Nums: []float64{1, 0}}, {Kind: ValueNumber, Num: 0}, {Kind: ValueString, Str: "LG"}} {
		_, err := slidingLayers(md(v), k, 4, "types")
		if want := "f.gguf: metadata key " + k + " is neither a layer count nor a flag for each of 4 layers"; err == nil || err.Error() != want {
			t.Errorf("%v: error %v, want %s", v, err, want)
		}
	}
}
