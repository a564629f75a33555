package mlx_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// TestReadSlice checks slices read from a file against the same slices
// taken by MLX of the whole tensor.
func TestReadSlice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.safetensors")
	vals := make([]float32, 4*6*5)
	for i := range vals {
		vals[i] = float32(i)
	}
	w, _ := mlx.NewArray(vals, 4, 6, 5)
	defer w.Free()
	bits := make([]uint16, 6*8)
	for i := range bits {
		bits[i] = uint16(i * 7)
	}
	h, _ := mlx.NewArrayBits(bits, mlx.BFloat16, 6, 8)
	defer h.Free()
	if err := mlx.SaveSafetensors(path, map[string]*mlx.Array{"w": w, "h": h}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := mlx.OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		name         string
		full         *mlx.Array
		axis, lo, hi int
	}{
		{"w", w, 0, 1, 3}, {"w", w, 1, 2, 5}, {"w", w, 2, 3, 5}, {"w", w, -1, 0, 5},
		{"h", h, 0, 3, 6}, {"h", h, 1, 4, 8}, {"h", h, 1, 0, 0},
	} {
		got, err := f.ReadSlice(tc.name, tc.axis, tc.lo, tc.hi)
		if err != nil {
			t.Fatal(err)
		}
		g := mlx.NewGraph(nil)
		nd := tc.full.Ndim()
		start, stop := make([]int, nd), tc.full.Shape()
		ax := (tc.axis + nd) % nd
		start[ax], stop[ax] = tc.lo, tc.hi
		want := g.Contiguous(g.Slice(tc.full, start, stop))
		if err := g.Eval(want); err != nil {
			t.Fatal(err)
		}
		gb, err1 := got.Bytes()
		wb, err2 := want.Bytes()
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !slices.Equal(gb, wb) || !slices.Equal(got.Shape(), want.Shape()) || got.Dtype() != want.Dtype() {
			t.Errorf("%s[%d: %d:%d]: %v %s, want %v %s", tc.name, tc.axis, tc.lo, tc.hi, got.Shape(), got.Dtype(), want.Shape(), want.Dtype())
		}
		g.Close()
		got.Free()
	}
	if _, err := f.ReadSlice("w", 1, 4, 7); err == nil {
		t.Error("a slice past the end was read")
	}
}
