package parity

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
)

// TestMoEAddedConfigErrors: phimoe's and exaone_moe's bad configs are
// refused with their exact messages, naming the key.
func TestMoEAddedConfigErrors(t *testing.T) {
	exaone := func(edit func(m map[string]any)) string {
		m := map[string]any{
			"model_type": "exaone_moe", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
			"moe_intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
			"rms_norm_eps": 1e-5, "vocab_size": 96, "max_position_embeddings": 256, "num_experts": 8,
			"num_experts_per_tok": 2, "num_shared_experts": 1, "sliding_window": 4,
			"layer_types":  []string{"sliding_attention", "full_attention"},
			"is_moe_layer": []bool{false, true},
		}
		edit(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, x := range []struct{ name, config, want string }{
		{"phimoe top_k over experts", `{"model_type": "phimoe", "num_local_experts": 4, "num_experts_per_tok": 5}`,
			"num_experts_per_tok: must not exceed num_local_experts"},
		{"phimoe rope_scaling without the mscales", `{"model_type": "phimoe", "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}`,
			"rope_scaling: must contain the keys short_factor, long_factor, short_mscale, long_mscale (missing short_mscale, long_mscale)"},
		{"phimoe rope_scaling with a null long_factor", `{"model_type": "phimoe", "rope_scaling": {"short_factor": [1.0], "long_factor": null, "short_mscale": null, "long_mscale": null}}`,
			"rope_scaling: long_factor: want a number or a list of numbers, got null"},
		{"exaone_moe top_k over experts", exaone(func(m map[string]any) { m["num_experts_per_tok"] = 9 }),
			"num_experts_per_tok: must not exceed num_experts"},
		{"exaone_moe topk_method", exaone(func(m map[string]any) { m["topk_method"] = "greedy" }),
			"topk_method: must be noaux_tc (the only router mlx-lm has)"},
		{"exaone_moe is_moe_layer missing", exaone(func(m map[string]any) { delete(m, "is_moe_layer") }),
			"is_moe_layer: missing (required)"},
		{"exaone_moe is_moe_layer too short", exaone(func(m map[string]any) { m["is_moe_layer"] = []bool{true} }),
			"is_moe_layer: has 1 entries, want 2 (num_hidden_layers)"},
		{"exaone_moe no full layer", exaone(func(m map[string]any) { m["layer_types"] = []string{"sliding_attention", "sliding_attention"} }),
			"layer_types: needs at least one layer that is not sliding_attention"},
		{"exaone_moe groups", exaone(func(m map[string]any) { m["n_group"] = 3 }),
			"n_group: must divide num_experts, and topk_group must not exceed it"},
	} {
		t.Run(x.name, func(t *testing.T) {
			var head struct {
				ModelType string `json:"model_type"`
			}
			if err := json.Unmarshal([]byte(x.config), &head); err != nil {
				t.Fatal(err)
			}
			a, err := registry.Lookup(head.ModelType)
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.Config([]byte(x.config))
			if err == nil || err.Error() != x.want {
				t.Errorf("error %v, want %q", err, x.want)
			}
		})
	}
}

// TestMoEAddedPerExpertLayout loads phimoe's, exaone_moe's and
// phixtral's parity checkpoints rewritten in Hugging Face's per-expert
// layout (phimoe's experts named w1, w3, w2; phixtral's under mlp, each
// fc1 and fc2 with their biases; a quantized level's scales and biases
// apart too) and checks their prefill logits equal the stacked
// checkpoints' bit for bit.
func TestMoEAddedPerExpertLayout(t *testing.T) {
	_, models, _ := derived(t)
	for _, x := range []struct {
		arch, cas, level string
		rename           map[string]string
		perExpert        string // default experts
	}{
		{"phimoe", "base", "float32", map[string]string{"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}, ""},
		{"phimoe", "wide_band_top4", "q4_g32", map[string]string{"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}, ""},
		{"exaone_moe", "base", "float32", nil, ""},
		{"exaone_moe", "groups_top4_allrope", "q8_g64", nil, ""},
		{"phixtral", "base", "float32", nil, "mlp"},
		{"phi-msft", "six_experts", "q4_g32", nil, "mlp"},
	} {
		t.Run(x.arch+"/"+x.cas+"/"+x.level, func(t *testing.T) {
			at := x.perExpert
			if at == "" {
				at = "experts"
			}
			perExpertMatchesAt(t, models, x.arch, x.cas, x.level, at, x.rename)
		})
	}
}

// TestLagunaPublishedLayout loads laguna's parity checkpoints rewritten as
// the published files hold them (every name under language_model., the
// router a bare gate.weight, its correction bias under experts., each
// expert's projections apart) and checks their prefill logits equal the
// checkpoints' in mlx-lm's layout bit for bit.
func TestLagunaPublishedLayout(t *testing.T) {
	_, models, _ := derived(t)
	for _, x := range []struct{ cas, level string }{{"base", "float32"}, {"sqrt_softplus_capped", "q8_g32"}} {
		t.Run(x.cas+"/"+x.level, func(t *testing.T) {
			c := CaseInfo{Arch: "laguna", Case: x.cas}
			dir := LevelDir(models, c, x.level)
			refs, err := LoadRefs(RefsDir(), c)
			if err != nil {
				t.Fatal(err)
			}
			published := filepath.Join(t.TempDir(), "published")
			renamed := 0
			unstack(t, dir, published, "switch_mlp", "experts", nil, func(g *mlx.Graph, ts map[string]*mlx.Array) {
				r := strings.NewReplacer(".mlp.gate.proj.weight", ".mlp.gate.weight",
					".mlp.gate.e_score_correction_bias", ".mlp.experts.e_score_correction_bias")
				for _, name := range slices.Collect(maps.Keys(ts)) {
					a := ts[name]
					to := r.Replace(name)
					if to != name {
						renamed++
					}
					delete(ts, name)
					ts["language_model."+to] = a
				}
			})
			if renamed == 0 {
				t.Fatal("no router tensor renamed: the layout test tests nothing")
			}
			if !slices.Equal(prefillDir(t, published, refs.Prompt), prefillDir(t, dir, refs.Prompt)) {
				t.Fatal("the published layout's logits differ from mlx-lm's layout's")
			}
		})
	}
}
