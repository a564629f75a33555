package mlx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad ops return errors carrying MLX's own message, and the process lives on.
func TestOpErrors(t *testing.T) {
	cases := []struct {
		name  string
		build func(g *Graph) *Array
		want  string // a part of the error text
	}{
		{"matmul of [2,3] by [2,3]", func(g *Graph) *Array {
			a := g.Zeros([]int{2, 3}, Float32)
			return g.Matmul(a, a)
		}, "mlx: matmul: [matmul] Last dimension of first input with shape (2,3) must match second to last dimension of second input with shape (2,3)."},
		{"reshape to a wrong size", func(g *Graph) *Array {
			return g.Reshape(g.Zeros([]int{2, 3}, Float32), 4, 2)
		}, "mlx: reshape: [reshape] Cannot reshape array of size 6 into shape (4,2)."},
		{"unknown dtype", func(g *Graph) *Array {
			return g.AsType(g.Zeros([]int{2}, Float32), Dtype(99))
		}, "mlx: astype: unknown dtype code 99"},
		{"concatenate of mismatched shapes", func(g *Graph) *Array {
			return g.Concatenate(0, g.Zeros([]int{2, 3}, Float32), g.Zeros([]int{2, 4}, Float32))
		}, "mlx: concatenate: [concatenate]"},
		{"data that does not fill the shape", func(g *Graph) *Array {
			return FromSlice(g, []float32{1, 2, 3}, 2, 2)
		}, "mlx: array: 3 elements do not fill shape [2 2]"},
		{"rope of odd dims", func(g *Graph) *Array {
			return g.RoPE(g.Zeros([]int{1, 1, 2, 6}, Float32), &RoPE{Dims: 3, Base: 10000, Scale: 1}, 0)
		}, "[rope] dims must be even but got 3."},
		{"swiglu of shapes that do not broadcast", func(g *Graph) *Array {
			return g.SwiGLU(g.Zeros([]int{2, 3}, Float32), g.Zeros([]int{2, 4}, Float32))
		}, "mlx: swiglu: [broadcast_shapes] Shapes (2,3) and (2,4) cannot be broadcast."},
		{"sdpa with an array mode and no array", func(g *Graph) *Array {
			q := g.Zeros([]int{1, 1, 2, 4}, Float32)
			return g.SDPA(q, q, q, 1, AttentionMask{Mode: "array"})
		}, "an array mask needs mode \"array\" and an array"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			out := c.build(g)
			if out.Valid() {
				t.Fatalf("a failed op returned a valid array")
			}
			err := g.Eval(out)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("error %T is not an *mlx.Error", err)
			}
			// Later ops do nothing and the first error stays.
			more := g.Add(g.Zeros([]int{1}, Float32), g.Zeros([]int{1}, Float32))
			if more.Valid() || g.Err() != err {
				t.Fatalf("an op after the failure ran, or replaced the error: %v", g.Err())
			}
			if _, rerr := out.Float32s(); rerr != err {
				t.Fatalf("reading the failed array gave %v, want the graph's error", rerr)
			}
		})
	}
}

func TestUseAfterFree(t *testing.T) {
	g := NewGraph(nil)
	a := g.Ones([]int{3}, Float32)
	kept := g.Ones([]int{3}, Float32)
	g.Keep(kept)
	if err := g.Eval(a, kept); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if a.Valid() {
		t.Fatal("an array of a closed graph is valid")
	}
	if _, err := a.Float32s(); err == nil {
		t.Fatal("reading an array of a closed graph worked")
	}
	// The kept array outlives its graph.
	if v, err := kept.Float32s(); err != nil || v[2] != 1 {
		t.Fatalf("kept array: %v %v", v, err)
	}
	h := NewGraph(nil)
	defer h.Close()
	if out := h.Add(a, kept); out.Valid() || h.Err() == nil ||
		!strings.Contains(h.Err().Error(), "argument 1 is invalid") {
		t.Fatalf("an op on a closed graph's array: %v", h.Err())
	}
	kept.Free()
	kept.Free() // twice is fine
	if kept.Valid() {
		t.Fatal("a freed array is valid")
	}
	// Reset: arrays of the old generation read as invalid.
	r := NewGraph(nil)
	defer r.Close()
	old := r.Ones([]int{2}, Float32)
	r.Reset()
	if old.Valid() || r.Live() != 0 {
		t.Fatalf("after Reset: old valid=%v live=%d", old.Valid(), r.Live())
	}
	if v, err := readAfter(r); err != nil || v[0] != 2 {
		t.Fatalf("graph after Reset: %v %v", v, err)
	}
}

func readAfter(g *Graph) ([]float32, error) {
	b := g.Full([]int{2}, 2, Float32)
	if err := g.Eval(b); err != nil {
		return nil, err
	}
	return b.Float32s()
}

func TestReadErrors(t *testing.T) {
	g := NewGraph(nil)
	defer g.Close()
	a := g.Ones([]int{2}, Int32)
	if _, err := a.Float32s(); err == nil || !strings.Contains(err.Error(), "int32, not a float dtype") {
		t.Fatalf("Float32s of int32: %v", err)
	}
	if _, err := ToSlice[float32](a); err == nil || !strings.Contains(err.Error(), "array is int32, not float32") {
		t.Fatalf("ToSlice of the wrong type: %v", err)
	}
	if _, err := a.Item(); err == nil || !strings.Contains(err.Error(), "2 elements, not 1") {
		t.Fatalf("Item of 2 elements: %v", err)
	}
	if _, err := ParseDtype("float8"); err == nil || err.Error() != `mlx: unknown dtype "float8"` {
		t.Fatalf("ParseDtype: %v", err)
	}
	if _, err := NewArray([]float32{1, 2, 3}, 2); err == nil {
		t.Fatal("NewArray with a wrong shape worked")
	}
}

func TestSafetensorsErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.safetensors")
	if _, _, err := LoadSafetensors(missing, nil); err == nil || !os.IsNotExist(errors.Unwrap(err)) && !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing file: %v", err)
	}
	// A real file, then cut short in its header and in its data.
	g := NewGraph(nil)
	defer g.Close()
	good := filepath.Join(dir, "good.safetensors")
	w := g.Arange(0, 64, 1, Float32)
	if err := g.Eval(w); err != nil {
		t.Fatal(err)
	}
	if err := SaveSafetensors(good, map[string]*Array{"w": w}, nil); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "0 bytes, shorter than the 8-byte header length"},
		{"cut in the header", data[:20], "exceeds the file's 12 remaining bytes"},
		{"cut in the data", data[:len(data)-10], "past the 246 bytes of data the file holds (truncated?)"},
		{"absurd header length", append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, data[8:]...), "header length 9223372036854775807 exceeds"},
		{"not JSON", append([]byte{4, 0, 0, 0, 0, 0, 0, 0}, "nope"...), "header is not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors")
			if err := os.WriteFile(p, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadSafetensors(p, nil)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q should name %s and say %q", err, p, c.want)
			}
		})
	}
}
