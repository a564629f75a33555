package parity

import (
	"os"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
)

// TestSequentialNeoXRefused: a GPT-NeoX config with sequential layers
// (use_parallel_residual false), which mlx-lm runs and no published
// checkpoint of the family has, is refused by name, not run as parallel.
func TestSequentialNeoXRefused(t *testing.T) {
	a, err := registry.Lookup("gpt_neox")
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile("../testdata/parity/gpt_neox/base/model/config.json")
	if err != nil {
		t.Fatal(err)
	}
	config = []byte(strings.Replace(string(config), `"use_parallel_residual": true`, `"use_parallel_residual": false`, 1))
	if !strings.Contains(string(config), `"use_parallel_residual": false`) {
		t.Fatal("the case's config holds no use_parallel_residual to turn off")
	}
	_, err = a.Config(config)
	want := "use_parallel_residual: false (sequential layers) is not supported: the layers here are parallel"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

// TestBERTConfigRefusals: the BERT configs whose computation the
// descriptor does not run (mlx-embeddings runs each as the exact GELU over
// absolute positions, whatever they say) are refused by key.
func TestBERTConfigRefusals(t *testing.T) {
	refusesConfigEdits(t, "bert", "../gen/testdata/configs/bert/all-minilm-l6-v2.json", []configEdit{
		{`"hidden_act": "gelu"`, `"hidden_act": "relu"`, `hidden_act: must be gelu (the exact GELU): the layers run no other activation`},
		{`"position_embedding_type": "absolute"`, `"position_embedding_type": "relative_key"`, `position_embedding_type: must be absolute: relative position embeddings are not supported`},
		{`"use_cache": true`, `"use_cache": true, "is_decoder": true`, `is_decoder: must be false: a causal BERT is not supported`},
	})
}

// TestModernBERTConfigRefusals: a ModernBERT config whose MLP or
// classifier activation is not the exact GELU, or whose classifier pools
// other than by cls or mean, is refused by key.
func TestModernBERTConfigRefusals(t *testing.T) {
	refusesConfigEdits(t, "modernbert", "../gen/testdata/configs/modernbert/handwritten-modernbert-base-shape.json", []configEdit{
		{`"hidden_activation": "gelu"`, `"hidden_activation": "silu"`, "hidden_activation: must be gelu (the exact GELU): the MLP runs no other activation"},
		{`"classifier_activation": "gelu"`, `"classifier_activation": "tanh"`, "classifier_activation: must be gelu (the exact GELU): the classifier's head runs no other activation"},
		{`"classifier_pooling": "mean"`, `"classifier_pooling": "max"`, "classifier_pooling: must be cls or mean"},
	})
}

// TestNomicBERTConfigRefusals: a nomic-bert config outside what the
// published models use (and llama.cpp's converter accepts) is refused by
// key.
func TestNomicBERTConfigRefusals(t *testing.T) {
	refusesConfigEdits(t, "nomic_bert", "../gen/testdata/configs/nomic_bert/handwritten-nomic-embed-text-v1.5-shape.json", []configEdit{
		{`"activation_function": "swiglu"`, `"activation_function": "gelu"`, "activation_function: must be swiglu: the MLP runs no other activation"},
		{`"activation_function": "swiglu"`, `"activation_function": "swiglu", "hidden_act": "gelu"`, "hidden_act: must be silu: the MLP's gate runs no other activation"},
		{`"rotary_emb_fraction": 1.0`, `"rotary_emb_fraction": 0.5`, "rotary_emb_fraction: must be 1.0: a partly rotated head is not supported"},
		{`"rotary_emb_interleaved": false`, `"rotary_emb_interleaved": true`, "rotary_emb_interleaved: must be false: interleaved rope is not supported"},
		{`"rotary_scaling_factor": null`, `"rotary_scaling_factor": 2.0`, "rotary_scaling_factor: must be null: dynamic NTK scaling is not supported"},
		{`"rotary_emb_scale_base": null`, `"rotary_emb_scale_base": 512`, "rotary_emb_scale_base: must be null: xPos scaling is not supported"},
		{`"qkv_proj_bias": false`, `"qkv_proj_bias": true`, "qkv_proj_bias: must be false: attention biases are not supported"},
		{`"mlp_fc1_bias": false`, `"mlp_fc1_bias": true`, "mlp_fc1_bias: must be false: MLP biases are not supported"},
		{`"mlp_fc2_bias": false`, `"mlp_fc2_bias": true`, "mlp_fc2_bias: must be false: MLP biases are not supported"},
		{`"prenorm": false`, `"prenorm": true`, "prenorm: must be false: pre-norm layers are not supported"},
		{`"causal": false`, `"causal": true`, "causal: must be false: a causal nomic-bert is not supported"},
		{`"use_rms_norm": false`, `"use_rms_norm": true`, "use_rms_norm: must be false: RMS norms are not supported"},
		{`"parallel_block": false`, `"parallel_block": false, "moe_every_n_layers": 2`, "moe_every_n_layers: must be 0: nomic-bert's mixture of experts (nomic-embed-text-v2-moe) is not supported"},
		{`"parallel_block": false`, `"parallel_block": true`, "parallel_block: must be false: parallel attention and MLP are not supported"},
		{`"n_head": 12`, `"n_head": 12, "rope_parameters": {"rope_type": "dynamic", "rope_theta": 1000, "factor": 2.0}`, "rope_type: must be default: scaled rope is not supported"},
		{`"n_embd": 768`, `"n_embd": 780`, "head_dim: must be even: rope rotates pairs"},
	})
}

// configEdit is a config.json edit (the first from becomes to) and what
// the error its config then gives holds.
type configEdit struct{ from, to, want string }

// refusesConfigEdits checks that arch refuses each edit of the config at
// path, which it reads as it is.
func refusesConfigEdits(t *testing.T, arch, path string, edits []configEdit) {
	t.Helper()
	a, err := registry.Lookup(arch)
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Config(config); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, c := range edits {
		bad := strings.Replace(string(config), c.from, c.to, 1)
		if bad == string(config) {
			t.Fatalf("the config holds no %s", c.from)
		}
		_, err := a.Config([]byte(bad))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.to, err, c.want)
		}
	}
}
