package kv

import (
	"strings"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// Bad input to a cache fails the step's graph with a message, never a
// panic, and leaves the cache as it was.
func TestUpdateErrors(t *testing.T) {
	shape := func(g *mlx.Graph, dims ...int) *mlx.Array { return g.Zeros(dims, mlx.Float32) }
	cases := []struct {
		name  string
		cache func() Cache
		prep  func(g *mlx.Graph, c Cache) // a first good step, or none
		k, v  []int
		dtype mlx.Dtype
		want  string
	}{
		{name: "keys not 4-D", cache: func() Cache { return NewPlain() }, k: []int{2, 3, 4}, v: []int{2, 3, 4},
			want: "must be [B, Hkv, L, D]"},
		{name: "keys and values of different lengths", cache: func() Cache { return NewPlain() }, k: []int{1, 2, 3, 8}, v: []int{1, 2, 4, 8},
			want: "the same B, Hkv and L"},
		{name: "no positions", cache: func() Cache { return NewRotating(4, 0) }, k: []int{1, 2, 0, 8}, v: []int{1, 2, 0, 8},
			want: "zero positions"},
		{name: "head dim changes", cache: func() Cache { return NewPlain() },
			prep: func(g *mlx.Graph, c Cache) { c.Update(g, shape(g, 1, 2, 3, 8), shape(g, 1, 2, 3, 8)) },
			k:    []int{1, 2, 1, 16}, v: []int{1, 2, 1, 16}, want: "do not match the cache's [1, 2, _, 8]"},
		{name: "head dim not a multiple of the group", cache: func() Cache { return NewQuantized(8, 64) }, k: []int{1, 2, 3, 48}, v: []int{1, 2, 3, 48},
			want: "multiples of its group size 64"},
		{name: "switch to quantized with a bad head dim", cache: func() Cache { return NewPlain().Quantize(Quantization{Bits: 4, Start: 3}) },
			prep: func(g *mlx.Graph, c Cache) { c.Update(g, shape(g, 1, 2, 3, 40), shape(g, 1, 2, 3, 40)) },
			k:    []int{1, 2, 1, 40}, v: []int{1, 2, 1, 40}, want: "multiples of its group size 64"},
		{name: "unsupported bits", cache: func() Cache { return NewQuantized(7, 64) }, k: []int{1, 2, 3, 64}, v: []int{1, 2, 3, 64},
			want: "7-bit"},
		{name: "unsupported group", cache: func() Cache { return NewRotating(8, 0).Quantize(Quantization{Bits: 4, GroupSize: 48}) },
			k: []int{1, 2, 3, 96}, v: []int{1, 2, 3, 96}, want: "group size 48"},
		{name: "integer keys to quantize", cache: func() Cache { return NewQuantized(8, 64) }, k: []int{1, 2, 3, 64}, v: []int{1, 2, 3, 64},
			dtype: mlx.Int32, want: "quantize"},
		{name: "ring keeps all it holds", cache: func() Cache { return NewRotating(4, 4) }, k: []int{1, 2, 1, 8}, v: []int{1, 2, 1, 8},
			want: "need 0 <= keep < max size"},
		{name: "ring of no size", cache: func() Cache { return NewRotating(0, 0) }, k: []int{1, 2, 1, 8}, v: []int{1, 2, 1, 8},
			want: "max size 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cache()
			defer c.Free()
			offset := 0
			if tc.prep != nil {
				g := mlx.NewGraph(nil)
				tc.prep(g, c)
				if err := g.Err(); err != nil {
					t.Fatalf("first step: %v", err)
				}
				g.Close()
				offset = c.Offset()
			}
			g := mlx.NewGraph(nil)
			defer g.Close()
			dt := tc.dtype
			if dt == 0 {
				dt = mlx.Float32
			}
			kv := c.Update(g, g.Zeros(tc.k, dt), g.Zeros(tc.v, dt))
			err := g.Eval(kvArrays(kv)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Update: %v; want an error saying %q", err, tc.want)
			}
			if c.Offset() != offset {
				t.Fatalf("a failed step moved the offset from %d to %d", offset, c.Offset())
			}
		})
	}
}

// A failed step leaves the cache usable: the next good step works.
func TestCacheUsableAfterFailedStep(t *testing.T) {
	for _, c := range []Cache{NewPlain(), NewRotating(4, 0), NewQuantized(8, 64)} {
		g := mlx.NewGraph(nil)
		feed(t, c, 1, 3)
		c.Update(g, g.Zeros([]int{1, 2, 1, 64}, mlx.Int32), g.Zeros([]int{1, 2, 1, 32}, mlx.Int32))
		if g.Err() == nil {
			t.Fatalf("%T: a bad step did not fail", c)
		}
		g.Close()
		feed(t, c, 2, 1)
		if c.Offset() != 4 {
			t.Fatalf("%T: offset %d after 3 + 1 good positions", c, c.Offset())
		}
		c.Free()
		if c.Offset() != 0 || c.Nbytes() != 0 {
			t.Fatalf("%T: Free left offset %d and %d bytes", c, c.Offset(), c.Nbytes())
		}
	}
}

func TestOptionsCheck(t *testing.T) {
	good := []Options{{}, {MaxKVSize: 512}, {KVBits: 8}, {KVBits: 4, KVGroupSize: 32, QuantizedKVStart: 5000},
		{Dtype: mlx.BFloat16}, {Dtype: mlx.Float16, KVBits: 4}, {Dtype: mlx.Float32}}
	for _, o := range good {
		if err := o.Check(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	bad := map[string]Options{
		"more than":        {MaxKVSize: 4},
		"negative":         {QuantizedKVStart: -1},
		"without KV bits":  {KVGroupSize: 64},
		"KV bits -1":       {KVBits: -1},
		"9-bit":            {KVBits: 9},
		"group size 16 is": {KVBits: 4, KVGroupSize: 16},
		"not int32":        {Dtype: mlx.Int32},
	}
	for want, o := range bad {
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v; want an error saying %q", o, err, want)
		}
	}
	// The kinds Options make.
	if c, ok := (Options{}).Full().(*Plain); !ok || c.quant.Bits != 0 {
		t.Errorf("Full: %T %+v", c, c)
	}
	if c, ok := (Options{MaxKVSize: 64, KVBits: 8}).Full().(*Rotating); !ok || c.maxSize != 64 || c.keep != MaxKVKeep || c.quant.Bits != 8 {
		t.Errorf("Full with a max KV size: %T %+v", c, c)
	}
	if c, ok := (Options{MaxKVSize: 64}).Sliding(16).(*Rotating); !ok || c.maxSize != 16 || c.keep != 0 {
		t.Errorf("Sliding: %T %+v", c, c)
	}
	if c, ok := (Options{Dtype: mlx.Float16}).Full().(*Plain); !ok || c.s.dtype != mlx.Float16 {
		t.Errorf("Full holding float16: %T %+v", c, c)
	}
	if c, ok := (Options{Dtype: mlx.BFloat16}).Sliding(16).(*Rotating); !ok || c.s.dtype != mlx.BFloat16 {
		t.Errorf("Sliding holding bfloat16: %T %+v", c, c)
	}
}

// State lets a prompt's chunk evaluate the caches' writes without
// evaluating attention: afterwards the cache holds the chunk.
func TestStateEvaluatesWrites(t *testing.T) {
	for _, c := range []interface {
		Cache
		State() []*mlx.Array
	}{NewPlain(), NewRotating(8, 2), NewQuantized(4, 64), NewRotating(8, 0).Quantize(Quantization{Bits: 8})} {
		if c.State() != nil {
			t.Fatalf("%T: an empty cache has state", c)
		}
		g := mlx.NewGraph(nil)
		k := g.Ones([]int{1, 2, 5, 64}, mlx.Float32)
		c.Update(g, k, k)
		if err := g.Eval(c.State()...); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		g.Close()
		if len(c.State()) == 0 || c.Offset() != 5 || c.Nbytes() == 0 {
			t.Fatalf("%T: offset %d, %d bytes after a prefill", c, c.Offset(), c.Nbytes())
		}
		for _, a := range c.State() {
			if !a.Valid() {
				t.Fatalf("%T: the state outlived the step's graph as an invalid array", c)
			}
		}
		c.Free()
	}
}
