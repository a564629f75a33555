package nn_test

import (
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/runtime/nn/nntest"
)

// TestLinearParts: a projection held as parts (a quantization block entry
// {"parts": N, "part_groups": G}, which the GGUF reader writes for a
// projection its file split into parts of different block types) gives
// the logits of the same weights held whole, its rows one part after
// another and in two groups; parts that do not make the projection are
// refused, naming it.
func TestLinearParts(t *testing.T) {
	const q = "model.layers.0.self_attn.q_proj"
	ids := []int32{1, 5, 9, 13, 40, 2}
	want := dirLogits(t, tinyCheckpoint(t, nil, nil), ids)
	// parts cuts q's rows into groups, and each group into parts of the
	// given shares: part j holds its share of every group
	parts := func(groups int, shares []int) func(g *mlx.Graph, ts map[string]*mlx.Array) {
		return func(g *mlx.Graph, ts map[string]*mlx.Array) {
			w := ts[q+".weight"]
			rows, cols := w.Dim(0), w.Dim(1)
			grouped := g.Reshape(w, groups, rows/groups, cols)
			at := 0
			for j, n := range shares {
				p := g.Slice(grouped, []int{0, at, 0}, []int{groups, at + n, cols})
				ts[q+".parts."+string(rune('0'+j))+".weight"] = g.Contiguous(g.Reshape(p, groups*n, cols))
				at += n
			}
			delete(ts, q+".weight")
		}
	}
	block := func(n, groups int) map[string]any {
		return map[string]any{"quantization": map[string]any{"group_size": 32, "bits": 4,
			q: map[string]any{"parts": n, "part_groups": groups}}}
	}
	for _, c := range []struct {
		name   string
		groups int
		shares []int
	}{{"one group", 1, []int{16, 8, 40}}, {"two groups", 2, []int{8, 24}}} {
		t.Run(c.name, func(t *testing.T) {
			dir := tinyCheckpoint(t, nil, parts(c.groups, c.shares))
			rewrite(t, dir, "config.json", func([]byte) []byte {
				return nntest.WithKeys(tinyLlama, block(len(c.shares), c.groups))
			})
			got := dirLogits(t, dir, ids)
			if d := largestDiff(got, want); d > 1e-5 {
				t.Fatalf("logits %g from the whole projection's", d)
			}
		})
	}
	for _, c := range []struct {
		name, want string
		n, groups  int
		shares     []int
	}{
		{"a part without a weight", ": layer 0: self_attn.q_proj: the quantization block holds it as 3 parts, and part 2 has no weight matrix (self_attn.q_proj.parts.2.weight)", 3, 1, []int{32, 32}},
		{"parts short of the projection's rows", ": layer 0: self_attn.q_proj: its 2 parts hold 48 rows, want 64", 2, 1, []int{32, 16}},
		{"a part's rows that do not split into the groups", ": layer 0: self_attn.q_proj: part 0's 6 rows do not split into 4 groups", 2, 4, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			edit := parts(1, c.shares)
			if c.shares == nil {
				edit = func(g *mlx.Graph, ts map[string]*mlx.Array) {
					w := ts[q+".weight"]
					ts[q+".parts.0.weight"] = g.Contiguous(g.Slice(w, []int{0, 0}, []int{6, 64}))
					ts[q+".parts.1.weight"] = g.Contiguous(g.Slice(w, []int{6, 0}, []int{64, 64}))
					delete(ts, q+".weight")
				}
			}
			dir := tinyCheckpoint(t, nil, edit)
			rewrite(t, dir, "config.json", func([]byte) []byte {
				return nntest.WithKeys(tinyLlama, block(c.n, c.groups))
			})
			if err := loadErr(t, dir); err.Error() != dir+c.want {
				t.Fatalf("error\n%s\nwant\n%s", err, dir+c.want)
			}
		})
	}
}

// dirLogits loads dir through the registry and runs ids through it.
func dirLogits(t *testing.T, dir string, ids []int32) []float32 {
	t.Helper()
	m, err := registry.Load(dir, nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	return logitsOf(t, m, m.NewCaches(), ids)
}
