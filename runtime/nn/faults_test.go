package nn_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/internal/npy"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/runtime/nn/nntest"
)

// The fault tests: broken config.json files and checkpoints loaded through
// the registry, as a user's model directory would be, each with the exact
// message it must give. docs/FAILURES.md lists them.

// tinyLlama is a small llama config the checkpoint faults start from.
const tinyLlama = `{
  "model_type": "llama",
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "num_hidden_layers": 2,
  "rms_norm_eps": 1e-5,
  "vocab_size": 96,
  "tie_word_embeddings": false
}`

// publishedConfig is the first published config.json of arch in
// gen/testdata/configs that mlx-lm accepts. A variant's (embeddinggemma's)
// is the first of its base's that the variant claims.
func publishedConfig(t *testing.T, arch string) map[string]any {
	t.Helper()
	folder, claims := arch, func([]byte) bool { return true }
	for _, a := range registry.Archs() {
		for _, v := range a.Variants {
			if v.Runs == arch {
				folder, claims = a.Name, func(data []byte) bool {
					cfg, err := a.Config(data)
					return err == nil && v.When(cfg)
				}
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join("../../gen/testdata/configs", folder, "*.json"))
	for _, f := range files {
		if strings.HasSuffix(f, ".mlxlm.json") || strings.HasPrefix(filepath.Base(f), "error-") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !claims(b) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(nn.PythonJSON(b), &m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		return m
	}
	t.Fatalf("no published config of %s", arch)
	return nil
}

// with is m with keys set (nil deletes), as JSON. Where m nests a
// text_config, whose keys win over the top level's, the keys other than
// model_type are set there.
func with(m map[string]any, keys map[string]any) []byte { return withTop(m, keys, nil) }

// withTop is with, setting also the keys of top (a wrapper's top_wins,
// whose top-level values replace text_config's) at the top level.
func withTop(m map[string]any, keys map[string]any, top []string) []byte {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	text := out
	if tc, ok := out["text_config"].(map[string]any); ok {
		text = map[string]any{}
		for k, v := range tc {
			text[k] = v
		}
		out["text_config"] = text
	}
	for k, v := range keys {
		dst := text
		if k == "model_type" || slices.Contains(top, k) {
			dst = out
		}
		if v == nil {
			delete(dst, k)
		} else {
			dst[k] = v
		}
	}
	b, _ := json.Marshal(out)
	return b
}

// layersKey is the key of a config that holds the layer count:
// num_hidden_layers, or num_layers where a config has that instead.
func layersKey(m map[string]any) string {
	return firstKey(m, "num_hidden_layers", "num_layers", "n_layer")
}

// mlpWidthKey is the config key of the MLP's width: block_ff_dim where the
// config has it (LFM2, whose intermediate_size is read only without it),
// else intermediate_size.
func mlpWidthKey(m map[string]any) string {
	if tc, ok := m["text_config"].(map[string]any); ok {
		m = tc
	}
	if _, ok := m["block_ff_dim"]; ok {
		return "block_ff_dim"
	}
	return firstKey(m, "intermediate_size", "n_inner")
}

// configDir is a new directory holding config.json with data.
func configDir(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loadErr loads dir through the registry and returns the error, failing
// the test when loading works.
func loadErr(t *testing.T, dir string) error {
	t.Helper()
	m, err := registry.Load(dir, nn.Options{})
	if err == nil {
		m.Free()
		t.Fatal("Load succeeded")
	}
	return err
}

// parseConfig parses data with arch's ParseConfig, or, for a wrapper, with
// the ParseConfig of the architecture running its unwrapped text model.
func parseConfig(arch *nn.Arch, data []byte) (any, error) {
	if arch.Wrapper == nil {
		return arch.Config(data)
	}
	runs, text, err := arch.Wrapper.Unwrap(data)
	if err != nil {
		return nil, err
	}
	a, err := registry.Lookup(runs)
	if err != nil {
		return nil, err
	}
	return a.Config(text)
}

// allDefaults are the architectures whose ModelArgs in mlx-lm give every
// size a default, so that a config may leave hidden_size out.
var allDefaults = map[string]bool{"phi": true, "cohere": true, "cohere2": true, "qwen": true, "phixtral": true}

// ownSizeKeys are the size keys of architectures that name them their own
// way where a published config may hold the usual names unread (phixtral's
// phi-msft configs carry n_embd and vocab_size; mlx-lm reads model_dim and
// num_vocab): hidden, layers and vocab, by role.
var ownSizeKeys = map[string][3]string{
	"phixtral": {"model_dim", "num_layers", "num_vocab"},
	"openelm":  {"model_dim", "num_transformer_layers", "vocab_size"},
}

// firstKey is the first of keys that m (or its text_config) holds, else
// the first of keys.
func firstKey(m map[string]any, keys ...string) string {
	if tc, ok := m["text_config"].(map[string]any); ok {
		m = tc
	}
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return k
		}
	}
	return keys[0]
}

// TestConfigFaults breaks a published config of every architecture in the
// ways every one must refuse, and loads it through the registry: the
// message names config.json and the key. The keys are the architecture's
// own (hidden_size or GPT-2's n_embd, and so on).
func TestConfigFaults(t *testing.T) {
	for _, arch := range registry.Archs() {
		t.Run(arch.Name, func(t *testing.T) {
			base := publishedConfig(t, arch.Name)
			layers := layersKey(base)
			hidden := firstKey(base, "hidden_size", "n_embd")
			vocab := "vocab_size"
			if own, ok := ownSizeKeys[arch.Name]; ok {
				hidden, layers, vocab = own[0], own[1], own[2]
			}
			heads := firstKey(base, "num_attention_heads", "n_head")
			kv := firstKey(base, "num_key_value_heads", "n_kv_heads")
			width := mlpWidthKey(base)
			with := func(m, keys map[string]any) []byte { return withTop(m, keys, wrapperTopWins(&arch)) }
			// mlx-lm gives some architectures' hidden_size a default
			// (mixtral, deepseek): a config without it is then no fault.
			_, noHidden := parseConfig(&arch, with(base, map[string]any{hidden: nil}))
			hiddenDefault := noHidden == nil
			// Eight heads that three KV heads do not divide; where the config
			// reads head_dim, a width that still fits eight heads of it.
			badKV := map[string]any{heads: 8, kv: 3}
			if hd, ok := base["head_dim"].(float64); ok {
				badKV[hidden] = 8 * hd
			}
			for _, c := range []struct {
				name string
				data []byte
				want string
			}{
				{"not JSON", []byte(`{"model_type": "` + arch.Name + `",`), "not a JSON object: unexpected end of JSON input"},
				{"not an object", []byte(`["` + arch.Name + `"]`), "not a JSON object: json: cannot unmarshal array into Go value of type struct { ModelType *string \"json:\\\"model_type\\\"\" }"},
				{"no model_type", with(base, map[string]any{"model_type": nil}), "model_type: missing (required)"},
				{"required key missing", with(base, map[string]any{hidden: nil}), hidden + ": missing (required)"},
				{"wrong type", with(base, map[string]any{hidden: "2048"}), hidden + `: want an integer, got "2048"`},
				{"fraction for an integer", with(base, map[string]any{layers: 2.5}), layers + ": want an integer, got 2.5"},
				{"zero size", with(base, map[string]any{hidden: 0}), hidden + ": must be at least 1, got 0"},
				{"negative layers", with(base, map[string]any{layers: -2}), layers + ": must be at least 1, got -2"},
				{"absurd layer count", with(base, map[string]any{layers: 1e12}), layers + ": 1000000000000 layers are more than archgen builds (at most 4096)"},
				{"zero vocabulary", with(base, map[string]any{vocab: 0}), vocab + ": must be at least 1, got 0"},
				{"zero MLP width", with(base, map[string]any{width: 0}), width + ": must be at least 1, got 0"},
				{"kv heads not dividing heads", with(base, badKV),
					kv + ": must divide " + heads},
				{"zero kv heads", with(base, map[string]any{kv: 0}), kv + ": must be at least 1, got 0"},
				{"two problems", with(base, map[string]any{hidden: nil, vocab: true}),
					hidden + ": missing (required)\n" + vocab + ": want an integer, got true"},
			} {
				if allDefaults[arch.Name] && strings.Contains(c.want, hidden+": missing") {
					// Nothing is required: a missing hidden_size is mlx-lm's default.
					// The same problems with hidden_size present and wrong instead.
					c.data = with(base, map[string]any{hidden: "x", vocab: true})
					c.want = hidden + ": want an integer, got \"x\"\n" + vocab + ": want an integer, got true"
					if c.name == "required key missing" {
						c.data = with(base, map[string]any{hidden: "x"})
						c.want = hidden + ": want an integer, got \"x\""
					}
				}
				t.Run(c.name, func(t *testing.T) {
					if hiddenDefault && strings.Contains(c.want, hidden+": missing") {
						t.Skipf("%s's %s has a default, as in mlx-lm", arch.Name, hidden)
					}
					if _, attends := base[heads]; !attends && (strings.Contains(c.name, "kv heads") || c.name == "zero MLP width") {
						t.Skipf("%s has neither attention nor a feed-forward block (its config has no %s)", arch.Name, heads)
					}
					if _, ok := base[kv]; !ok && strings.Contains(c.name, "kv heads") {
						t.Skipf("%s's configs hold no %s: every head has its own keys", arch.Name, kv)
					}
					if slices.Contains(arch.Ignored, kv) && strings.Contains(c.name, "kv heads") {
						t.Skipf("%s reads no %s (its heads share one latent of keys and values)", arch.Name, kv)
					}
					if _, ok := base[width]; (!ok || slices.Contains(arch.Ignored, width)) && c.name == "zero MLP width" {
						t.Skipf("%s's MLP width is not read from the config (%s): it follows the hidden size", arch.Name, width)
					}
					if strings.HasPrefix(c.want, layers+":") && slices.Contains(arch.Ignored, layers) {
						t.Skipf("%s's layer count is its pattern's length, as in mlx-lm: %s is not read (TestConfigFaultsByArch tests the pattern)", arch.Name, layers)
					}
					dir := configDir(t, c.data)
					err := loadErr(t, dir)
					want := filepath.Join(dir, "config.json") + ": " + c.want
					if c.name == "zero MLP width" {
						// the least width is the architecture's (Qwen 1 halves it)
						want = strings.Replace(want, "must be at least 1", "must be at least "+minOf(err.Error()), 1)
					}
					if err.Error() != want {
						t.Fatalf("error\n%s\nwant\n%s", err, want)
					}
					if arch.Wrapper != nil && c.name == "no model_type" {
						return // the text model's model_type is the wrapper's to set: only loading sees it missing
					}
					if _, err := parseConfig(&arch, c.data); err == nil {
						t.Fatal("ParseConfig accepts it")
					}
				})
			}
		})
	}
}

// minOf is the bound a "must be at least N" message names ("1" where none).
func minOf(msg string) string {
	const at = "must be at least "
	i := strings.Index(msg, at)
	if i < 0 {
		return "1"
	}
	rest := msg[i+len(at):]
	if j := strings.Index(rest, ","); j > 0 {
		return rest[:j]
	}
	return "1"
}

// TestConfigFaultsByArch: the checks that depend on what an architecture
// reads (per-layer lists, rope_scaling).
func TestConfigFaultsByArch(t *testing.T) {
	for _, c := range []struct {
		arch string
		keys map[string]any
		want string
	}{
		{"llama", map[string]any{"layer_types": []string{"full_attention"}}, "layer_types: has 1 entries, want 32 (num_hidden_layers)"},
		{"llama", map[string]any{"layer_types": []string{"sliding_attention"}, "num_hidden_layers": 1, "sliding_window": 4}, "layer_types: needs at least one full_attention layer"},
		{"gpt_oss", map[string]any{"layer_types": []string{"full_attention", "full_attention"}, "num_hidden_layers": 2}, "layer_types: needs at least one sliding_attention layer"},
		{"gpt_oss", map[string]any{"num_hidden_layers": 3, "layer_types": nil}, "num_hidden_layers: odd without layer_types: mlx-lm's default pattern (sliding, full) covers an even number of layers and skips the last; give layer_types"},
		{"smollm3", map[string]any{"no_rope_layers": []int{1, 0}}, "no_rope_layers: has 2 entries, want 36 (num_hidden_layers)"},
		{"mamba2", map[string]any{"n_groups": 5}, "n_groups: must divide num_heads"},
		{"jamba", map[string]any{"attn_layer_period": 1, "attn_layer_offset": 0}, `layers_block_type: entries must be "attention" or "mamba", at least one of each (mlx-lm looks both up)`},
		{"jamba", map[string]any{"mamba_dt_rank": "narrow"}, `mamba_dt_rank: want an integer, got "narrow"`},
		{"recurrent_gemma", map[string]any{"block_types": nil, "_block_types": []string{"recurrent", "recurrent"}}, `block_types: needs an "attention" entry (mlx-lm looks one up)`},
		{"recurrent_gemma", map[string]any{"block_types": nil, "_block_types": nil}, "block_types: missing (required)"},
		{"recurrent_gemma", map[string]any{"intermediate_size": 1}, "intermediate_size: must be at least 2 (the MLP is half of it wide)"},
		{"recurrent_gemma", map[string]any{"num_attention_heads": 12}, "num_attention_heads: must divide hidden_size (the attention heads and the RG-LRU's gate blocks split it)"},
		{"olmo_hybrid", map[string]any{"layer_types": []string{"linear_attention", "mamba", "linear_attention", "full_attention"}, "num_hidden_layers": 4}, `layer_types: entries must be "linear_attention" or "full_attention"`},
		{"olmo_hybrid", map[string]any{"linear_num_key_heads": 3}, "linear_num_value_heads: must be a multiple of linear_num_key_heads"},
		{"falcon_h1", map[string]any{"mamba_d_ssm": 1024}, "mamba_d_ssm: must equal mamba_n_heads × mamba_d_head (the scan's heads side by side)"},
		{"falcon_h1", map[string]any{"ssm_multipliers": []float64{1, 2}}, "ssm_multipliers: has 2 entries, want 5 (5)"},
		{"mamba2", map[string]any{"time_step_limit": nil}, "time_step_limit: missing (required)"},
		{"plamo2", map[string]any{"mamba_step": 1}, "mamba_step: must be at least 2, got 1"},
		{"gemma4_text", map[string]any{"num_kv_shared_layers": 60}, "num_kv_shared_layers: must be below num_hidden_layers, so that a layer keeps keys and values of its own"},
		{"gemma4_text", map[string]any{"num_hidden_layers": 4, "num_kv_shared_layers": 1, "layer_types": []string{"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"}}, "num_kv_shared_layers: each layer that shares keys and values needs a layer of its type among the ones before them (layer_types)"},
		{"gemma4_text", map[string]any{"num_hidden_layers": 4, "layer_types": []string{"full_attention", "chunked_attention", "sliding_attention", "full_attention"}}, "layer_types: each entry must be full_attention or sliding_attention"},
		{"gemma4_text", map[string]any{"enable_moe_block": true}, "num_experts: must be set with enable_moe_block\ntop_k_experts: must be set with enable_moe_block, at most num_experts\nmoe_intermediate_size: must be set with enable_moe_block"},
		{"gemma4_text", map[string]any{"enable_moe_block": true, "num_experts": 4, "top_k_experts": 8, "moe_intermediate_size": 16}, "top_k_experts: must be set with enable_moe_block, at most num_experts"},
		{"gemma4_text", map[string]any{"layer_types": []string{"full_attention"}, "num_kv_shared_layers": 2}, "layer_types: has 1 entries, want 60 (num_hidden_layers)\nnum_kv_shared_layers: each layer that shares keys and values needs a layer of its type among the ones before them (layer_types)"},
		{"gemma4_text", map[string]any{"hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 10}, "vocab_size_per_layer_input: must be at least vocab_size, so that every token has a row of per-layer inputs"},
		{"gemma4_text", map[string]any{"rope_parameters": map[string]any{"sliding_attention": map[string]any{"rope_type": "linear", "factor": 2.0}}}, "sliding_rope_type: must be default (rope_parameters' sliding_attention rope_type)"},
		{"openelm", map[string]any{"num_kv_heads": []int{5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5}}, "num_kv_heads: each entry must be at least 1 and divide the layer's num_query_heads"},
		{"openelm", map[string]any{"num_kv_heads": []int{0, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5}}, "num_kv_heads: each entry must be at least 1 and divide the layer's num_query_heads"},
		{"openelm", map[string]any{"num_query_heads": []int{12, 12}}, "num_query_heads: has 2 entries, want 16 (num_transformer_layers)"},
		{"openelm", map[string]any{"ffn_multipliers": []float64{0.5, 0.73, 0.97, 1.2, 1.43, 1.67, 1.9, 2.13, 2.37, 2.6, 2.83, 3.07, 3.3, 3.53, 3.77, -4}}, "ffn_multipliers: each entry must be above 0"},
		{"plamo", map[string]any{"n_shared_head": 3}, "n_shared_head: must divide num_attention_heads (mlx-lm tiles the key-value heads n_shared_head times, which must give one per query head)"},
		{"phixtral", map[string]any{"num_experts_per_tok": 3}, "num_experts_per_tok: must not exceed num_local_experts"},
		{"phixtral", map[string]any{"rotary_dim": 33}, "rotary_dim: must be even and at most a head's width (model_dim / num_heads)"},
		{"phixtral", map[string]any{"rotary_dim": 96}, "rotary_dim: must be even and at most a head's width (model_dim / num_heads)"},
		{"phixtral", map[string]any{"model_dim": 2500}, "model_dim: must be divisible by num_heads"},
		{"mellum", map[string]any{"layer_types": []string{"sliding_attention"}, "num_hidden_layers": 1}, "layer_types: each entry must be full_attention or sliding_attention, and one at least full_attention"},
		{"mellum", map[string]any{"rope_parameters": map[string]any{"sliding_attention": map[string]any{"rope_theta": 10000.0}}}, "full_rope_theta: rope_parameters.full_attention.rope_theta is required (and above 0)"},
		{"mellum", map[string]any{"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_theta": 10000.0}}}, "sliding_rope_theta: rope_parameters.sliding_attention.rope_theta is required where layers slide (and above 0)"},
		{"mellum", map[string]any{"num_experts_per_tok": 65}, "num_experts_per_tok: must not exceed num_experts"},
		{"laguna", map[string]any{"moe_router_score_func": "softmax"}, "moe_router_score_func: must be sigmoid or sqrtsoftplus"},
		{"laguna", map[string]any{"num_hidden_layers": 2, "num_attention_heads_per_layer": []int{48, 12}}, "num_attention_heads_per_layer: each entry must be at least 1 and a multiple of num_key_value_heads"},
		{"laguna", map[string]any{"num_hidden_layers": 2, "layer_types": []string{"sliding_attention", "sliding_attention"}}, "layer_types: each entry must be full_attention or sliding_attention, and one at least full_attention"},
		{"laguna", map[string]any{"partial_rotary_factor": 0.01}, "full_partial: rope_parameters' full_attention partial_rotary_factor must rotate an even number of a head's features, at least 2"},
		{"spark2_5", map[string]any{"hidden_act": "silu"}, "hidden_act: must be gelu (mlx-lm's spark2_5 requires it)"},
		{"spark2_5", map[string]any{"headwise_attn_output_gate": false}, "headwise_attn_output_gate: must be true (mlx-lm's spark2_5 requires head-wise output gates)"},
		{"spark2_5", map[string]any{"rope_parameters": map[string]any{"full_attention": map[string]any{"partial_rotary_factor": 0.001}, "sliding_attention": map[string]any{}}}, "full_rotary_factor: rope_parameters' full_attention partial_rotary_factor must rotate an even number of a head's features, at least 2"},
		{"baichuan_m1", map[string]any{"conv_window": 3}, "conv_window: must be 2 (mlx-lm's convolution of keys and values reads the one step before)"},
		{"baichuan_m1", map[string]any{"tie_word_embeddings": true}, "tie_word_embeddings: true is not supported (mlx-lm's baichuan_m1 always reads lm_head)"},
		{"baichuan_m1", map[string]any{"num_swa_attention_heads": 24}, "hidden_size: must be a multiple of num_attention_heads and of num_swa_attention_heads (head_dim is hidden_size / heads)"},
		{"baichuan_m1", map[string]any{"num_swa_key_value_heads": 3}, "num_swa_key_value_heads: must divide the sliding layers' query heads"},
		{"plamo2", map[string]any{"num_key_value_heads": 3}, "num_key_value_heads: must divide num_attention_heads"},
		{"bailing_moe", map[string]any{"score_function": "noaux"}, "score_function: must be softmax or sigmoid"},
		{"bailing_moe", map[string]any{"num_experts_per_tok": 65}, "num_experts_per_tok: must not exceed num_experts"},
		{"bailing_moe", map[string]any{"norm_head": true, "tie_word_embeddings": true}, "norm_head: scales lm_head's columns, and a tied head has no lm_head (mlx-lm's sanitize fails on one)"},
		{"bailing_moe_linear", map[string]any{"head_dim": 64}, "head_dim: must be hidden_size / num_attention_heads: the lightning layers' heads are that wide and share the attention layers' rope"},
		{"bailing_moe_linear", map[string]any{"score_function": "noaux"}, "score_function: must be softmax or sigmoid"},
		{"bailing_moe_linear", map[string]any{"use_bias": true}, "use_bias: biases on the output projections and every MLP are not supported (the shared experts take none)"},
		{"bailing_moe_linear", map[string]any{"norm_head": true, "tie_word_embeddings": true}, "norm_head: scales lm_head's columns, and a tied head has no lm_head (mlx-lm's sanitize fails on one)"},
		{"bailing_moe_linear", map[string]any{"n_group": 3}, "n_group: must divide num_experts into groups of at least two (a group is scored by its two best), and topk_group must not exceed it"},
		{"nemotron_h", map[string]any{"hybrid_override_pattern": "M*X-"}, "hybrid_override_pattern: each layer must be M (Mamba2), * (attention), - (MLP) or E (mixture of experts); layers_block_type's words: full_attention, linear_attention, mlp, moe (or attention, mamba, conv)"},
		{"nemotron_h", map[string]any{"hybrid_override_pattern": nil, "layers_block_type": []string{"mamba", "attention", "dense"}}, "hybrid_override_pattern: each layer must be M (Mamba2), * (attention), - (MLP) or E (mixture of experts); layers_block_type's words: full_attention, linear_attention, mlp, moe (or attention, mamba, conv)"},
		{"nemotron_h", map[string]any{"hybrid_override_pattern": nil}, "hybrid_override_pattern: missing: give hybrid_override_pattern or layers_block_type (or layer_types) to describe the layer stack"},
		{"nemotron_h", map[string]any{"moe_latent_size": 1024}, "moe_latent_size: latent expert projections (Nemotron 3 Super's fc1_latent_proj and fc2_latent_proj) are not supported"},
		{"nemotron_h", map[string]any{"n_groups": 5}, "n_groups: must divide mamba_num_heads"},
		{"nemotron_h", map[string]any{"routed_scaling_factor": nil}, "n_routed_experts: n_routed_experts, num_experts_per_tok (at most n_routed_experts), moe_intermediate_size and routed_scaling_factor must be set where the pattern has E layers"},
		{"nemotron_h", map[string]any{"n_group": 3, "topk_group": 1}, "n_group: must divide n_routed_experts, with topk_group between 1 and n_group"},
		{"granitemoehybrid", map[string]any{"layer_types": []string{"mamba", "attention"}}, "layer_types: has 2 entries, want 40 (num_hidden_layers)"},
		{"granitemoehybrid", map[string]any{"mamba_n_groups": 5}, "mamba_n_groups: must divide mamba_n_heads"},
		{"granitemoehybrid", map[string]any{"mamba_d_state": nil}, "mamba_n_heads: mamba_n_heads, mamba_d_head, mamba_d_state, mamba_d_conv and mamba_n_groups must all be set (at least 1) when layer_types has mamba layers"},
		{"granitemoehybrid", map[string]any{"num_local_experts": 8, "num_experts_per_tok": 9, "shared_intermediate_size": 64}, "num_experts_per_tok: must be between 1 and num_local_experts, with shared_intermediate_size set, when num_local_experts is"},
		{"granitemoehybrid", map[string]any{"time_step_limit": []float64{0.001}}, "time_step_limit: has 1 entries, want 2 (2)"},
		{"gemma2", map[string]any{"head_dim": -1}, "head_dim: must be at least 1, got -1"},
		{"llama", map[string]any{"rope_scaling": "linear"}, `rope_scaling: want an object, got "linear"`},
		{"llama", map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3"}}, `rope_scaling: type "llama3" needs factor`},
		{"llama", map[string]any{"rope_scaling": map[string]any{"rope_type": "ntk", "factor": 2}},
			`rope_scaling: unsupported type "ntk" (want one of default, linear, dynamic, llama3, yarn, deepseek_yarn, telechat3-yarn, longrope, proportional, mrope)`},
		{"llama", map[string]any{"rope_scaling": map[string]any{"rope_type": "linear", "factor": "2"}}, `rope_scaling: factor: want a number, got "2"`},
		{"llama", map[string]any{"rope_scaling": map[string]any{"type": "dynamic", "factor": 2}, "max_position_embeddings": nil},
			`rope_scaling: type "dynamic" needs max_position_embeddings in the config`},
		{"phi3", map[string]any{"rope_scaling": map[string]any{"type": "longrope", "long_factor": []float64{1}}},
			`rope_scaling: type "longrope" needs short_factor`},
		{"phi3", map[string]any{"rope_scaling": map[string]any{"short_factor": []float64{1}}},
			"rope_scaling: must contain the keys long_factor and type"},
		{"stablelm", map[string]any{"use_parallel_residual": true},
			"use_parallel_residual: true is not supported (archgen builds stablelm with sequential residuals)"},
		{"stablelm", map[string]any{"qk_layernorm": true},
			"qk_layernorm: true is not supported (archgen builds stablelm without q and k LayerNorms)"},
		{"stablelm", map[string]any{"num_attention_heads": 48, "num_key_value_heads": 48},
			"hidden_size: must be divisible by num_attention_heads"},
		{"internlm3", map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2}},
			"rope_scaling: must hold factor and a rope_type of linear or dynamic"},
		{"hunyuan_v1_dense", map[string]any{"use_qk_norm": false},
			"use_qk_norm: false is not supported (archgen builds hunyuan_v1_dense with its q and k norms)"},
		{"deepseek_v3", map[string]any{"qk_rope_head_dim": 63}, "qk_rope_head_dim: must be even (the rope rotates pairs)"},
		{"deepseek_v3", map[string]any{"n_routed_experts": 16, "num_experts_per_tok": 2, "topk_method": "greedy"},
			"topk_method: must be noaux_tc, the only method mlx-lm routes by"},
		{"deepseek_v2", map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2}},
			"rope_scaling: must be yarn's settings: mlx-lm's DeepSeek-V2 runs yarn's rope whatever the type says"},
		{"deepseek_v2", map[string]any{"rope_scaling": map[string]any{"type": "yarn", "original_max_position_embeddings": 4096}},
			"rope_scaling_factor: missing (required)"},
		{"deepseek_v2", map[string]any{"num_experts_per_tok": nil}, "num_experts_per_tok: must be set where n_routed_experts is, and not exceed it"},
		{"deepseek_v2", map[string]any{"topk_method": "group_limited_greedy", "n_group": nil},
			"n_group: must be set with topk_group where topk_method is group_limited_greedy, divide n_routed_experts, and not be below topk_group"},
	} {
		t.Run(c.arch+"/"+c.want, func(t *testing.T) {
			dir := configDir(t, with(publishedConfig(t, c.arch), c.keys))
			err := loadErr(t, dir)
			if want := filepath.Join(dir, "config.json") + ": " + c.want; err.Error() != want {
				t.Fatalf("error\n%s\nwant\n%s", err, want)
			}
		})
	}
}

// TestModelTypeFaults: model_types the registry does not run, and a
// config handed to the wrong architecture.
func TestModelTypeFaults(t *testing.T) {
	for mt, want := range map[string]string{
		"bailing_hybrid":    `model_type "bailing_hybrid" is not supported (supported: `,
		"deepseek_v41_text": `model_type "deepseek_v41_text" is an alias of "deepseek_v41", which archgen does not support`,
		"gemma4_assistant":  `model_type "gemma4_assistant" is a speculative-decoding drafter, which runs beside a target model, not on its own`,
	} {
		dir := configDir(t, []byte(`{"model_type": "`+mt+`", "hidden_size": 64}`))
		err := loadErr(t, dir)
		if !strings.HasPrefix(err.Error(), dir+": "+want) {
			t.Errorf("%s: error\n%s\nwant\n%s%s", mt, err, dir+": ", want)
		}
	}
	dir := configDir(t, []byte(`{"model_type": 7}`))
	if err := loadErr(t, dir); err.Error() != filepath.Join(dir, "config.json")+": not a JSON object: json: cannot unmarshal number into Go struct field .model_type of type string" {
		t.Errorf("numeric model_type: %v", err)
	}
	llama, err := registry.Lookup("llama")
	if err != nil {
		t.Fatal(err)
	}
	dir = configDir(t, with(publishedConfig(t, "qwen2"), nil))
	m, err := llama.Load(dir, nn.Options{})
	if err == nil {
		m.Free()
		t.Fatal("llama.Load of a qwen2 config worked")
	}
	if want := filepath.Join(dir, "config.json") + `: model_type: "qwen2" is not llama or mistral or iquestcoder or xverse`; err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
}

// TestHiddenNotDivisibleByHeads: like mlx-lm, a hidden size that is no
// multiple of the head count is accepted (head_dim is hidden_size //
// heads, and the projections are shaped by it); the model then computes
// what mlx-lm computes on the same checkpoint.
func TestHiddenNotDivisibleByHeads(t *testing.T) {
	arch, err := registry.Lookup("llama")
	if err != nil {
		t.Fatal(err)
	}
	config := nntest.WithKeys(tinyLlama, map[string]any{"hidden_size": 66})
	cfg, err := arch.Config(config)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	var parsed struct {
		HeadDim int `json:"head_dim"`
	}
	b, _ := json.Marshal(cfg)
	if json.Unmarshal(b, &parsed); parsed.HeadDim != 16 {
		t.Fatalf("head_dim %d, want 66 // 4 = 16", parsed.HeadDim)
	}
	c := nntest.Random(t, *arch, config, 21)
	dir := t.TempDir()
	c.Write(t, dir, mlx.Float32, false, nil)
	m, err := registry.Load(dir, nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	tokens := []int32{3, 17, 42, 5, 88, 61}
	g := mlx.NewGraph(nil)
	defer g.Close()
	logits := m.Forward(g, mlx.FromSlice(g, tokens, 1, len(tokens)), m.NewCaches())
	if err := g.Eval(logits); err != nil {
		t.Fatal(err)
	}
	got, err := logits.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	want := mlxlmLogits(t, dir, tokens)
	if !slices.Equal(want.Shape, []int{len(tokens), 96}) {
		t.Fatalf("mlx-lm's logits are %v", want.Shape)
	}
	ref := want.Data.([]float32)
	worst := 0.0
	for i := range ref {
		worst = max(worst, float64(abs(got[i]-ref[i])))
	}
	if worst > 1e-4 {
		t.Fatalf("logits differ from mlx-lm's by up to %g", worst)
	}
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// mlxlmLogits runs testdata/mlxlm_logits.py on dir.
func mlxlmLogits(t *testing.T, dir string, tokens []int32) npy.Array {
	t.Helper()
	py, err := filepath.Abs("../../.deps/py/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	ids := make([]string, len(tokens))
	for i, id := range tokens {
		ids[i] = strconv.Itoa(int(id))
	}
	out := filepath.Join(t.TempDir(), "logits.npy")
	if b, err := exec.Command(py, "testdata/mlxlm_logits.py", dir, out, strings.Join(ids, ",")).CombinedOutput(); err != nil {
		t.Fatalf("mlx-lm: %v\n%s", err, b)
	}
	a, err := npy.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tinyCheckpoint writes a random tiny llama checkpoint (config with keys
// set) to a new directory, with edit changing its tensors.
func tinyCheckpoint(t *testing.T, keys map[string]any, edit func(g *mlx.Graph, ts map[string]*mlx.Array)) string {
	t.Helper()
	arch, err := registry.Lookup("llama")
	if err != nil {
		t.Fatal(err)
	}
	c := nntest.Random(t, *arch, nntest.WithKeys(tinyLlama, keys), 5)
	dir := t.TempDir()
	c.Write(t, dir, mlx.Float32, false, edit)
	return dir
}

// rewrite replaces dir/name with f of its contents.
func rewrite(t *testing.T, dir, name string, f func([]byte) []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWeightFaults breaks a checkpoint's files and tensors; each load
// fails with a message naming the file or the tensor. (Missing, misshapen
// and unexpected tensors are every architecture's TestLoadErrors.)
func TestWeightFaults(t *testing.T) {
	const q = "model.layers.0.self_attn.q_proj"
	quant := map[string]any{"quantization": map[string]any{"group_size": 32, "bits": 4}}
	// cut is a checkpoint whose model.safetensors keeps n bytes (n < 0:
	// all but -n), with the figures its header gives.
	type figures struct {
		dir          string
		headerLen    uint64
		size         int64
		last         string // the tensor stored last
		end, dataLen int64
	}
	cut := func(t *testing.T, n int) figures {
		dir := tinyCheckpoint(t, nil, nil)
		p := filepath.Join(dir, "model.safetensors")
		h, err := mlx.ReadSafetensorsHeader(p)
		if err != nil {
			t.Fatal(err)
		}
		f := figures{dir: dir, dataLen: h.DataSize}
		for _, ti := range h.Tensors {
			if ti.End > f.end {
				f.last, f.end = ti.Name, ti.End
			}
		}
		rewrite(t, dir, "model.safetensors", func(b []byte) []byte {
			f.headerLen = binary.LittleEndian.Uint64(b)
			if n < 0 {
				n += len(b)
			}
			f.size = int64(n)
			return b[:n]
		})
		return f
	}
	for _, c := range []struct {
		name string
		make func(t *testing.T) (dir, want string) // want follows "DIR"
	}{
		{"no weights file", func(t *testing.T) (string, string) {
			return configDir(t, []byte(tinyLlama)), ": no model.safetensors, model.safetensors.index.json or model*.safetensors"
		}},
		{"wrong dtype", func(t *testing.T) (string, string) {
			return tinyCheckpoint(t, nil, func(g *mlx.Graph, ts map[string]*mlx.Array) {
				ts[q+".weight"] = g.Zeros([]int{64, 64}, mlx.Int32)
			}), ": layer 0: self_attn.q_proj.weight: dtype int32, want a float dtype"
		}},
		{"header cut short", func(t *testing.T) (string, string) {
			f := cut(t, 100)
			return f.dir, fmt.Sprintf("/model.safetensors: not a valid safetensors file: header length %d exceeds the file's 92 remaining bytes (truncated, or not safetensors)", f.headerLen)
		}},
		{"data cut short", func(t *testing.T) (string, string) {
			f := cut(t, -4)
			return f.dir, fmt.Sprintf("/model.safetensors: not a valid safetensors file: tensor %q: data ends at byte %d, past the %d bytes of data the file holds (truncated?)", f.last, f.end, f.dataLen-4)
		}},
		{"absurd header length", func(t *testing.T) (string, string) {
			dir := tinyCheckpoint(t, nil, nil)
			var size int
			rewrite(t, dir, "model.safetensors", func(b []byte) []byte {
				copy(b, []byte{0, 0, 0, 0, 0, 0, 0, 0x80})
				size = len(b)
				return b
			})
			return dir, fmt.Sprintf("/model.safetensors: not a valid safetensors file: header length 9223372036854775808 exceeds the file's %d remaining bytes (truncated, or not safetensors)", size-8)
		}},
		{"a Git LFS pointer instead of the file", func(t *testing.T) (string, string) {
			dir := tinyCheckpoint(t, nil, nil)
			rewrite(t, dir, "model.safetensors", func([]byte) []byte {
				return []byte("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 196048\n")
			})
			return dir, `/model.safetensors: not a valid safetensors file: it starts with "version ", as a Git LFS pointer file does: the tensors were not downloaded (git lfs pull)`
		}},
		{"index naming a missing shard", func(t *testing.T) (string, string) {
			dir := tinyCheckpoint(t, nil, nil)
			os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "model-00001-of-00002.safetensors"))
			os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map": {
				"model.norm.weight": "model-00001-of-00002.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors"}}`), 0o644)
			return dir, "/model.safetensors.index.json names model-00002-of-00002.safetensors: stat " + dir + "/model-00002-of-00002.safetensors: no such file or directory"
		}},
		{"index not JSON", func(t *testing.T) (string, string) {
			dir := tinyCheckpoint(t, nil, nil)
			os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map": `), 0o644)
			return dir, "/model.safetensors.index.json: want an object with a weight_map"
		}},
		{"quantization block of an unsupported group size", func(t *testing.T) (string, string) {
			return configDir(t, nntest.WithKeys(tinyLlama, map[string]any{"quantization": map[string]any{"group_size": 48, "bits": 4}})),
				"/config.json: quantization: group size 48 is not supported (want 32, 64 or 128)"
		}},
		{"quantization bits that do not fit the packed shape", func(t *testing.T) (string, string) {
			dir := tinyCheckpoint(t, quant, nil)
			rewrite(t, dir, "config.json", func([]byte) []byte {
				return nntest.WithKeys(tinyLlama, map[string]any{"quantization": map[string]any{
					"group_size": 32, "bits": 4, q: map[string]any{"group_size": 32, "bits": 8}}})
			})
			return dir, ": layer 0: self_attn.q_proj.weight: shape [64 8], want [64 16]"
		}},
		{"quantization group size that does not divide the rows", func(t *testing.T) (string, string) {
			dir := tinyCheckpoint(t, quant, nil)
			rewrite(t, dir, "config.json", func([]byte) []byte {
				return nntest.WithKeys(tinyLlama, map[string]any{"quantization": map[string]any{
					"group_size": 32, "bits": 4, q: map[string]any{"group_size": 128, "bits": 4}}})
			})
			return dir, ": layer 0: self_attn.q_proj: 64 columns do not split into groups of 128"
		}},
		{"scales that do not fit the weight", func(t *testing.T) (string, string) {
			return tinyCheckpoint(t, quant, func(g *mlx.Graph, ts map[string]*mlx.Array) {
				ts[q+".scales"] = g.Zeros([]int{64, 3}, mlx.Float32)
			}), ": layer 0: self_attn.q_proj: scales [64 3] and weight [64 8] do not fit rows of 64"
		}},
		{"uint8 scales of a floating-point mode other than mxfp4", func(t *testing.T) (string, string) {
			return tinyCheckpoint(t, quant, func(g *mlx.Graph, ts map[string]*mlx.Array) {
				ts[q+".weight"] = g.Zeros([]int{64, 16}, mlx.Uint32)
				ts[q+".scales"] = g.Zeros([]int{64, 2}, mlx.Uint8)
			}), ": layer 0: self_attn.q_proj: quantized in a floating-point mode (uint8 scales) at 8 bits in groups of 32; of those only mxfp4 (4 bits, groups of 32) is supported"
		}},
		{"packing of an unsupported width", func(t *testing.T) (string, string) {
			return tinyCheckpoint(t, quant, func(g *mlx.Graph, ts map[string]*mlx.Array) {
				ts[q+".weight"] = g.Zeros([]int{64, 14}, mlx.Uint32)
			}), ": layer 0: self_attn.q_proj: 7 bits are not supported (want 2, 3, 4, 5, 6 or 8)"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, want := c.make(t)
			err := loadErr(t, dir)
			if want = dir + want; err.Error() != want {
				t.Fatalf("error\n%s\nwant\n%s", err, want)
			}
		})
	}
}

// TestWeightsMemoryLimit: a model whose weights take more than
// Options.MemoryLimit is refused before they are read.
func TestWeightsMemoryLimit(t *testing.T) {
	dir := tinyCheckpoint(t, nil, nil)
	h, err := mlx.ReadSafetensorsHeader(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	size := h.DataSize // float32 as stored: the weights' bytes
	before := mlx.ActiveMemory()
	_, err = registry.Load(dir, nn.Options{MemoryLimit: uint64(size - 1)})
	want := fmt.Sprintf("%s: the weights take %d bytes, more than the memory limit of %d bytes", dir, size, size-1)
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant %s", err, want)
	}
	if grew := int64(mlx.ActiveMemory()) - int64(before); grew > size/2 {
		t.Errorf("the refused load left %d bytes held", grew)
	}
	// In bfloat16 the same weights fit in half.
	m, err := registry.Load(dir, nn.Options{MemoryLimit: uint64(size / 2), Dtype: mlx.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	m.Free()
}

// wrapperTopWins are the top-level keys a wrapper's text model reads from
// the top level (none for an architecture of its own).
func wrapperTopWins(a *nn.Arch) []string {
	if a.Wrapper == nil {
		return nil
	}
	return a.Wrapper.TopWins
}
