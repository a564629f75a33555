package parity

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestLatentSplitErrors: a checkpoint whose latent-attention up-projections
// (Hugging Face's kv_b_proj) cannot be split is refused, naming the
// tensor, on deepseek_v3/base (4 heads of nope 32 and value 32 over a
// latent of 64; its float32 checkpoint holds kv_b_proj, its q4_g32_kv_b
// level a quantized one).
func TestLatentSplitErrors(t *testing.T) {
	_, models, _ := derived(t)
	c := CaseInfo{Arch: "deepseek_v3", Case: "base"}
	const attn = "model.layers.1.self_attn."
	for _, x := range []struct {
		name, level string
		edit        func(g *mlx.Graph, ts map[string]*mlx.Array)
		want        string
	}{
		{"both forms", "float32", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			ts[attn+"embed_q.weight"] = g.Zeros([]int{4, 64, 32}, mlx.Float32)
		}, "layer 1: both self_attn.kv_b_proj.weight and self_attn.embed_q.weight: the checkpoint holds the up-projections twice"},
		{"a wrong shape", "float32", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			a := ts[attn+"kv_b_proj.weight"]
			ts[attn+"kv_b_proj.weight"] = g.Slice(a, []int{0, 0}, []int{a.Dim(0) - 8, a.Dim(1)})
		}, "layer 1: self_attn.kv_b_proj.weight: float32 [248 64], want a float [256, 64] (4 heads of 32 + 32 rows over a latent of 64)"},
		{"quantized without biases", "q4_g32_kv_b", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			delete(ts, attn+"kv_b_proj.biases")
		}, "layer 1: missing self_attn.kv_b_proj.biases: a quantized self_attn.kv_b_proj is split as affine-quantized (scales and biases)"},
		{"groups wider than the key part", "q4_g32_kv_b", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			w := g.Dequantize(mlx.Quantized{Weight: ts[attn+"kv_b_proj.weight"], Scales: ts[attn+"kv_b_proj.scales"],
				Biases: ts[attn+"kv_b_proj.biases"], GroupSize: 32, Bits: 4, Mode: "affine"}, mlx.Dtype(255))
			q := g.Quantize(w, 64, 4)
			ts[attn+"kv_b_proj.weight"], ts[attn+"kv_b_proj.scales"], ts[attn+"kv_b_proj.biases"] = q.Weight, q.Scales, q.Biases
		}, "layer 1: self_attn.kv_b_proj: quantized in groups of 64, which do not divide the key part's 32 columns its split quantizes"},
	} {
		t.Run(x.name, func(t *testing.T) {
			dir := LevelDir(models, c, x.level)
			ts, _, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
			if err != nil {
				t.Fatal(err)
			}
			g := mlx.NewGraph(nil)
			defer g.Close()
			x.edit(g, ts)
			out := filepath.Join(t.TempDir(), "edited")
			saveBeside(t, dir, out, ts)
			_, err = registry.Load(out, nn.Options{})
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), x.want) {
				t.Fatalf("error %q, want it to hold %q", err, x.want)
			}
		})
	}
}
