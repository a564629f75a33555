package parity

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestSigmoidRouterLayouts loads the glm4_moe and minimax parity
// checkpoints in Hugging Face's per-expert layout (minimax's experts named
// w1, w3 and w2 under block_sparse_moe, its correction bias beside the
// router) and checks their prefill logits equal the stacked checkpoints'
// bit for bit.
func TestSigmoidRouterLayouts(t *testing.T) {
	_, models, _ := derived(t)
	minimax := map[string]string{"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
	for _, x := range []struct {
		arch, cas, level string
		rename           map[string]string
	}{
		{"glm4_moe", "base", "float32", nil},
		{"glm4_moe", "groups_top4", "q4_g32", nil},
		{"minimax", "base", "float32", minimax},
		{"minimax_m2", "base", "q8_g64", minimax},
	} {
		t.Run(x.arch+"/"+x.cas+"/"+x.level, func(t *testing.T) {
			perExpertMatches(t, models, x.arch, x.cas, x.level, x.rename)
		})
	}
}

// perExpertMatches writes the level's checkpoint of a parity case in
// Hugging Face's per-expert layout (each stacked projection renamed by
// rename) and checks its prefill logits equal the stacked one's bit for
// bit.
func perExpertMatches(t *testing.T, models, arch, cas, level string, rename map[string]string) {
	t.Helper()
	perExpertMatchesAt(t, models, arch, cas, level, "experts", rename)
}

// perExpertMatchesAt is perExpertMatches with the experts apart under
// perExpert (<mlp>.<perExpert>.<e>.<proj>).
func perExpertMatchesAt(t *testing.T, models, arch, cas, level, perExpert string, rename map[string]string) {
	t.Helper()
	c := CaseInfo{Arch: arch, Case: cas}
	dir := LevelDir(models, c, level)
	refs, err := LoadRefs(RefsDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	hf := filepath.Join(t.TempDir(), "hf")
	unstack(t, dir, hf, "switch_mlp", perExpert, rename, nil)
	if !slices.Equal(prefillDir(t, hf, refs.Prompt), prefillDir(t, dir, refs.Prompt)) {
		t.Fatal("the per-expert checkpoint's logits differ from the stacked one's")
	}
}

// TestGLM4MoEDropsTheMTPLayer: a glm4_moe checkpoint holding a
// multi-token-prediction layer after its last (model.layers.3 of three,
// per-expert as Hugging Face stores it) loads with that layer dropped, to
// the same logits; the same tensors one layer further are refused.
func TestGLM4MoEDropsTheMTPLayer(t *testing.T) {
	_, models, _ := derived(t)
	c := CaseInfo{Arch: "glm4_moe", Case: "base"}
	dir := LevelDir(models, c, "float32")
	refs, err := LoadRefs(RefsDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	withLayer := func(n string) string {
		out := filepath.Join(t.TempDir(), "mtp"+n)
		unstack(t, dir, out, "switch_mlp", "experts", nil, func(g *mlx.Graph, ts map[string]*mlx.Array) {
			for name, a := range ts {
				if rest, ok := strings.CutPrefix(name, "model.layers.2."); ok {
					ts["model.layers."+n+"."+rest] = a
				}
			}
			ts["model.layers."+n+".eh_proj.weight"] = ts["model.layers.2.self_attn.o_proj.weight"]
			ts["model.layers."+n+".enorm.weight"] = ts["model.norm.weight"]
		})
		return out
	}
	if !slices.Equal(prefillDir(t, withLayer("3"), refs.Prompt), prefillDir(t, dir, refs.Prompt)) {
		t.Fatal("the checkpoint with an MTP layer gives other logits")
	}
	_, err = registry.Load(withLayer("4"), nn.Options{})
	if err == nil {
		t.Fatal("a layer past the MTP layer loaded")
	}
	if want := "unexpected tensor model.layers.4."; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q, want it to hold %q", err, want)
	}
}

// TestSigmoidRouterConfigErrors: glm4_moe and minimax configs that
// mlx-lm cannot route (more experts per token than there are, groups
// that do not split the experts or leave one in a group, a top-k method
// it asserts against, a rope wider than a head) are refused, naming the
// key.
func TestSigmoidRouterConfigErrors(t *testing.T) {
	glm := func(over string) string {
		return `{"model_type": "glm4_moe", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 2048, ` +
			`"moe_intermediate_size": 32, "norm_topk_prob": true, "num_attention_heads": 4, "head_dim": 16, "n_shared_experts": 1, ` +
			`"routed_scaling_factor": 1.0, "first_k_dense_replace": 1, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-05, ` +
			`"rope_theta": 10000.0, "rope_scaling": null, "use_qk_norm": true, "tie_word_embeddings": false, "attention_bias": true, ` +
			`"partial_rotary_factor": 0.5, ` + over + `}`
	}
	minimax := func(over string) string {
		return `{"model_type": "minimax", "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, ` +
			`"max_position_embeddings": 2048, "num_hidden_layers": 2, "rms_norm_eps": 1e-06, "rope_theta": 5000000.0, "vocab_size": 128, ` +
			`"shared_intermediate_size": 0, "head_dim": 16, ` + over + `}`
	}
	for _, x := range []struct{ config, want string }{
		{glm(`"n_routed_experts": 8, "num_experts_per_tok": 9, "n_group": 1, "topk_group": 1`), "num_experts_per_tok: must not exceed n_routed_experts"},
		{glm(`"n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 3, "topk_group": 1`), "n_group: must divide n_routed_experts, and topk_group must not exceed it"},
		{glm(`"n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 3`), "n_group: must divide n_routed_experts, and topk_group must not exceed it"},
		{glm(`"n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 8, "topk_group": 4`), "n_group: must leave at least two experts in each group (a group is scored by its two best)"},
		{glm(`"n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "topk_method": "greedy"`), "topk_method: must be noaux_tc, the only method mlx-lm routes by"},
		{minimax(`"num_local_experts": 4, "num_experts_per_tok": 5, "rotary_dim": 8`), "num_experts_per_tok: must not exceed num_local_experts"},
		{minimax(`"num_local_experts": 8, "num_experts_per_tok": 2, "rotary_dim": 32`), "rotary_dim: must not exceed head_dim"},
	} {
		a, err := registry.Lookup(modelType(t, x.config))
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Config([]byte(x.config))
		if err == nil || err.Error() != x.want {
			t.Errorf("%s: error %v, want %q", a.Name, err, x.want)
		}
	}
	// the same configs within bounds parse
	for _, config := range []string{
		glm(`"n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2`),
		minimax(`"num_local_experts": 8, "num_experts_per_tok": 2, "rotary_dim": 16`),
	} {
		a, err := registry.Lookup(modelType(t, config))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Config([]byte(config)); err != nil {
			t.Errorf("%s: %v", a.Name, err)
		}
	}
}
