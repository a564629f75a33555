package nn_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/llama"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/runtime/nn/nntest"
)

// TestWrappedCheckpoint: a checkpoint whose config nests the text model's
// under text_config and whose tensors carry a wrapper's prefixes, beside a
// vision tower, loads through a catalog's wrapper on the text model's
// architecture and gives exactly the logits of the bare checkpoint.
func TestWrappedCheckpoint(t *testing.T) {
	wrap := nn.Arch{Name: "wrapped_llama", Tier: "smoke", Doc: "A wrapper.", Wrapper: &nn.Wrapper{
		Section:  "text_config",
		TopWins:  []string{"vocab_size"},
		Runs:     "llama",
		Prefixes: []nn.Prefix{{From: "model.language_model.", To: "model."}, {From: "language_model.", To: ""}},
		Drop:     []string{"vision_tower"},
	}}
	cat := nn.NewCatalog([]nn.Arch{llama.Arch, wrap}, nil, nil)
	ck := nntest.Random(t, llama.Arch, []byte(tinyLlama), 7)
	bare := t.TempDir()
	ck.Write(t, bare, mlx.Float32, false, nil)

	var text map[string]any
	json.Unmarshal([]byte(tinyLlama), &text)
	vocab := text["vocab_size"]
	text["vocab_size"] = 1 // the top-level value wins
	cfg, _ := json.Marshal(map[string]any{"model_type": "wrapped_llama", "vocab_size": vocab, "text_config": text})
	wrapped := t.TempDir()
	ck.Write(t, wrapped, mlx.Float32, false, func(g *mlx.Graph, tensors map[string]*mlx.Array) {
		for i, name := range slices.Sorted(maps.Keys(tensors)) {
			to := "language_model." + name
			if rest, ok := strings.CutPrefix(name, "model."); ok && i%2 == 0 {
				to = "model.language_model." + rest
			}
			tensors[to] = tensors[name]
			delete(tensors, name)
		}
		tensors["vision_tower.patch_conv.weight"] = mlx.FromSlice(g, []float32{1, 2}, 2)
	})
	os.WriteFile(filepath.Join(wrapped, "config.json"), cfg, 0o644)

	logits := func(dir string) []float32 {
		m, err := cat.Load(dir, nn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free()
		g := mlx.NewGraph(nil)
		defer g.Close()
		x := g.AsType(m.Forward(g, mlx.FromSlice(g, []int32{1, 5, 9, 3}, 1, 4), m.NewCaches()), mlx.Float32)
		if err := g.Eval(x); err != nil {
			t.Fatal(err)
		}
		v, err := x.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want, got := logits(bare), logits(wrapped)
	if !slices.Equal(want, got) {
		t.Fatalf("wrapped logits differ from the bare checkpoint's")
	}

	// A wrapper's config without its section is refused by key.
	os.WriteFile(filepath.Join(wrapped, "config.json"), []byte(`{"model_type": "wrapped_llama"}`), 0o644)
	if _, err := cat.Load(wrapped, nn.Options{}); err == nil || err.Error() != filepath.Join(wrapped, "config.json")+": text_config: missing (required): the text model's config" {
		t.Fatalf("error %v", err)
	}
}
