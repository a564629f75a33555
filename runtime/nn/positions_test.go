package nn

import (
	"testing"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// TestAddPositions: the rows of a learned position table for the tokens
// after a cache's offset are added to each row of h; a position past the
// table's rows fails, naming both, rather than reading past it.
func TestAddPositions(t *testing.T) {
	g := mlx.NewGraph(nil)
	defer g.Close()
	const rows, dims = 8, 4
	vals := make([]float32, rows*dims)
	for i := range vals {
		vals[i] = float32(i)
	}
	table := &Embedding{Weight: mlx.FromSlice(g, vals, rows, dims)}
	c := kv.NewPlain()
	defer c.Free()
	k := g.Zeros([]int{1, 1, 5, 2}, mlx.Float32)
	c.Update(g, k, k) // 5 positions held
	h := g.Zeros([]int{2, 3, dims}, mlx.Float32)
	out := AddPositions(g, h, table, c)
	if err := g.Eval(out); err != nil {
		t.Fatal(err)
	}
	got, err := out.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for b := range 2 {
		for j := range 3 {
			for d := range dims {
				if want := float32((5+j)*dims + d); got[(b*3+j)*dims+d] != want {
					t.Fatalf("row %d, token %d, feature %d: %g, want %g", b, j, d, got[(b*3+j)*dims+d], want)
				}
			}
		}
	}
	AddPositions(g, g.Zeros([]int{1, 4, dims}, mlx.Float32), table, c)
	want := "nn: position 8 is past the 8 positions the model's table holds (its n_positions)"
	if err := g.Err(); err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
