package parity

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestMXFP4PublishedLayout loads gpt-oss checkpoints in the layout OpenAI
// publishes them in: each layer's experts as gate_up_proj_blocks (gate and
// up rows interleaved, the mxfp4 words as bytes [E, 2H, G, 16]),
// gate_up_proj_scales and gate_up_proj_bias, and down_proj_blocks,
// _scales and _bias, with a quantization_config {"quant_method": "mxfp4"}
// where mlx-lm writes its quantization block. Each is made from a case's
// mxfp4 level (mlx-lm's layout, made by mlx_lm.convert) by the inverse of
// mlx-lm's sanitize, so it must load to the same model: its prefill logits
// equal the level's bit for bit, and its greedy decode meets mlx-lm's
// mxfp4 references as the level does. It also checks the errors of blocks
// of the wrong dtype and of a missing part.
func TestMXFP4PublishedLayout(t *testing.T) {
	_, models, _ := derived(t)
	for _, cas := range []string{"yarn_default_layers", "layer_types_top4_mha"} {
		c := CaseInfo{Arch: "gpt_oss", Case: cas}
		dir := LevelDir(models, c, "mxfp4")
		refs, err := LoadRefs(RefsDir(), c)
		if err != nil {
			t.Fatal(err)
		}
		g := mlx.NewGraph(nil)
		defer g.Close()
		ts, _, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
		if err != nil {
			t.Fatal(err)
		}
		// interleave: [E, H, ...] twice into [E, 2H, ...], gate rows even
		interleave := func(a, b *mlx.Array) *mlx.Array {
			s := a.Shape()
			return g.Reshape(g.Stack(2, a, b), append([]int{s[0], 2 * s[1]}, s[2:]...)...)
		}
		blocks := func(w *mlx.Array) *mlx.Array { // uint32 [E, R, X] as bytes [E, R, X/4, 16]
			s := w.Shape()
			return g.Reshape(g.View(w, mlx.Uint8), s[0], s[1], s[2]/4, 16)
		}
		hf := map[string]*mlx.Array{}
		layers := 0
		for name, a := range ts {
			p, part, ok := strings.Cut(name, ".mlp.experts.")
			if !ok {
				hf[name] = a
				continue
			}
			p += ".mlp.experts."
			switch part {
			case "gate_proj.weight":
				layers++
				hf[p+"gate_up_proj_blocks"] = blocks(interleave(a, ts[p+"up_proj.weight"]))
				hf[p+"gate_up_proj_scales"] = interleave(ts[p+"gate_proj.scales"], ts[p+"up_proj.scales"])
				hf[p+"gate_up_proj_bias"] = interleave(ts[p+"gate_proj.bias"], ts[p+"up_proj.bias"])
			case "down_proj.weight":
				hf[p+"down_proj_blocks"] = blocks(a)
			case "down_proj.scales":
				hf[p+"down_proj_scales"] = a
			case "down_proj.bias":
				hf[p+"down_proj_bias"] = a
			case "gate_proj.scales", "gate_proj.bias", "up_proj.weight", "up_proj.scales", "up_proj.bias":
			default:
				t.Fatalf("unexpected expert tensor %s", name)
			}
		}
		if layers == 0 {
			t.Fatalf("%s: no mxfp4 experts", dir)
		}
		if s := ts["model.layers.0.mlp.experts.gate_proj.scales"]; s == nil || s.Dtype() != mlx.Uint8 {
			t.Fatalf("%s: the experts' scales are not mxfp4's uint8", dir)
		}
		var config map[string]any
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &config); err != nil {
			t.Fatal(err)
		}
		delete(config, "quantization")
		config["quantization_config"] = map[string]any{"quant_method": "mxfp4"}
		save := func(t *testing.T, tensors map[string]*mlx.Array) string {
			t.Helper()
			out := filepath.Join(t.TempDir(), "hf")
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(config)
			if err := os.WriteFile(filepath.Join(out, "config.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := mlx.SaveSafetensors(filepath.Join(out, "model.safetensors"), tensors, nil); err != nil {
				t.Fatal(err)
			}
			return out
		}
		t.Run(cas, func(t *testing.T) {
			out := save(t, hf)
			if !slices.Equal(prefillDir(t, out, refs.Prompt), prefillDir(t, dir, refs.Prompt)) {
				t.Fatal("the published layout's logits differ from those of mlx-lm's layout")
			}
			m, err := registry.Load(out, nn.Options{Dtype: nn.CheckpointDtype})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			want, err := LoadDumps(RefsDir(), c, "mxfp4")
			if err != nil {
				t.Fatal(err)
			}
			r, err := Check(m, refs, want, "mxfp4")
			if err != nil {
				t.Fatal(err)
			}
			if !r.Pass() {
				t.Fatalf("against mlx-lm's mxfp4 references: %s", strings.Join(r.Problems(want.Vocab), "; "))
			}
		})
		if cas != "yarn_default_layers" {
			continue
		}
		bad := func(t *testing.T, edit func(m map[string]*mlx.Array), msg string) {
			t.Helper()
			m := map[string]*mlx.Array{}
			for k, v := range hf {
				m[k] = v
			}
			edit(m)
			_, err := registry.Load(save(t, m), nn.Options{})
			if err == nil || !strings.Contains(err.Error(), msg) {
				t.Fatalf("error %v, want it to hold %q", err, msg)
			}
		}
		const p = "model.layers.0.mlp.experts."
		t.Run("float blocks", func(t *testing.T) {
			bad(t, func(m map[string]*mlx.Array) {
				m[p+"down_proj_blocks"] = g.AsType(m[p+"down_proj_blocks"], mlx.Float32)
			},
				"layer 0: mlp.experts.down_proj_blocks: float32 [8 64 2 16], want uint8 [experts, rows, groups, 16] (mxfp4 blocks of 32 values)")
		})
		t.Run("missing scales", func(t *testing.T) {
			bad(t, func(m map[string]*mlx.Array) { delete(m, p+"down_proj_scales") },
				"layer 0: missing mlp.experts.down_proj_scales (the experts' fused gate and up are in blocks, so every part must be)")
		})
	}
}
