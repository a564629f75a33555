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
	a, err := registry.Lookup("bert")
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile("../gen/testdata/configs/bert/all-minilm-l6-v2.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Config(config); err != nil {
		t.Fatalf("the published config: %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"hidden_act": "gelu"`, `"hidden_act": "relu"`, `hidden_act: must be gelu (the exact GELU): the layers run no other activation`},
		{`"position_embedding_type": "absolute"`, `"position_embedding_type": "relative_key"`, `position_embedding_type: must be absolute: relative position embeddings are not supported`},
		{`"use_cache": true`, `"use_cache": true, "is_decoder": true`, `is_decoder: must be false: a causal BERT is not supported`},
	} {
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

// TestModernBERTConfigRefusals: a ModernBERT config whose MLP or
// classifier activation is not the exact GELU, or whose classifier pools
// other than by cls or mean, is refused by key.
func TestModernBERTConfigRefusals(t *testing.T) {
	a, err := registry.Lookup("modernbert")
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile("../gen/testdata/configs/modernbert/handwritten-modernbert-base-shape.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"hidden_activation": "gelu"`, `"hidden_activation": "silu"`, "hidden_activation: must be gelu (the exact GELU): the MLP runs no other activation"},
		{`"classifier_activation": "gelu"`, `"classifier_activation": "tanh"`, "classifier_activation: must be gelu (the exact GELU): the classifier's head runs no other activation"},
		{`"classifier_pooling": "mean"`, `"classifier_pooling": "max"`, "classifier_pooling: must be cls or mean"},
	} {
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
