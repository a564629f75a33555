package nn_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// lightningDir is a float32 Bailing checkpoint (mlx-lm's, from the parity
// matrix): lightning layers 0 and 2 beside attention on 1, 3 and 4.
const lightningDir = "../../testdata/parity/bailing_moe_linear/softmax_groups/model"

// venvPython is the project's Python with mlx-lm.
func venvPython(t *testing.T) string {
	t.Helper()
	py, err := filepath.Abs("../../.deps/py/bin/python")
	if err == nil {
		_, err = os.Stat(py)
	}
	if err != nil {
		t.Fatalf("the Python venv with mlx-lm is missing (run make setup): %v", err)
	}
	return py
}

// mlxlmPromptCache has mlx-lm run the first n of ids through the model in
// dir and save its caches (save_prompt_cache), then run the rest over them:
// the file and those logits.
func mlxlmPromptCache(t *testing.T, dir string, ids []int32, n int) (string, []float32) {
	t.Helper()
	js, err := json.Marshal(ids)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if b, err := exec.Command(venvPython(t), "testdata/prompt_cache_refs.py", dir, string(js), fmt.Sprint(n), out).CombinedOutput(); err != nil {
		t.Fatalf("prompt_cache_refs.py: %v\n%s", err, b)
	}
	ref, _, err := mlx.LoadSafetensors(filepath.Join(out, "logits.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref["logits"].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(out, "cache.safetensors"), want
}

// TestLightningLogDecay: each head's log decay, for head counts that are
// powers of two and others (whose slopes take every other one of the
// next power's), at every layer of stacks of several depths, equals the
// one mlx-lm's bailing_moe_linear makes (LinearAttention._slope), to the
// bit.
func TestLightningLogDecay(t *testing.T) {
	py := venvPython(t)
	const script = `
import json, sys
from mlx_lm.models import bailing_moe_linear as b
out = {}
for heads in range(1, 21):
    for layers in (1, 2, 5, 20):
        args = b.ModelArgs(model_type="bailing_moe_linear", hidden_size=heads * 4, intermediate_size=8,
            max_position_embeddings=64, moe_intermediate_size=8, num_experts=2, num_shared_experts=0,
            norm_topk_prob=True, num_attention_heads=heads, num_experts_per_tok=1, num_hidden_layers=layers,
            num_key_value_heads=heads, rms_norm_eps=1e-6, rope_theta=10000.0, vocab_size=8,
            first_k_dense_replace=0, layer_group_size=layers + 1, group_norm_size=1)
        for i in range(layers):
            out[f"{heads}/{layers}/{i}"] = b.LinearAttention(args, i)._slope.tolist()
json.dump(out, sys.stdout)
`
	b, err := exec.Command(py, "-c", script).Output()
	if err != nil {
		t.Fatalf("mlx-lm's slopes: %v", err)
	}
	var want map[string][]float32
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for heads := 1; heads <= 20; heads++ {
		for _, layers := range []int{1, 2, 5, 20} {
			for i := range layers {
				key := fmt.Sprintf("%d/%d/%d", heads, layers, i)
				// the factor Bailing's descriptor gives (decay_factor)
				factor := 1 - float64(max(0, i-1))/float64(max(1, layers-1)) + 1e-5
				got := nn.LightningLogDecay(heads, factor)
				w := want[key]
				if len(got) != len(w) {
					t.Fatalf("%s: %d decays, mlx-lm %d", key, len(got), len(w))
				}
				for h := range got {
					if math.Float32bits(got[h]) != math.Float32bits(w[h]) {
						t.Errorf("%s head %d: %g, mlx-lm %g", key, h, got[h], w[h])
					}
				}
				checked++
			}
		}
	}
	if checked != len(want) {
		t.Errorf("checked %d stacks' layers, mlx-lm made %d", checked, len(want))
	}
}

// TestLightningPromptCacheFromMLXLM: caches mlx-lm saved after a prompt of
// a Bailing model (an ArraysCache of one slot on the lightning layers,
// which keeps no token count, and KVCaches on the attention layers) load
// here, the lightning layers' states taking the attention caches' count
// (their rope reads it), and continue the prompt as mlx-lm continues it,
// within the float32 tolerance.
func TestLightningPromptCacheFromMLXLM(t *testing.T) {
	ids := hybridPrompt(20)
	const n = 13
	file, want := mlxlmPromptCache(t, lightningDir, ids, n)
	m := loadHybrid(t, lightningDir)
	caches, _, err := kv.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(caches) != len(m.NewCaches()) {
		t.Fatalf("%d caches in mlx-lm's file, want %d", len(caches), len(m.NewCaches()))
	}
	states := 0
	for i, c := range caches {
		if _, ok := c.(*kv.States); ok {
			states++
		}
		if c.Offset() != n {
			t.Errorf("layer %d's cache (%T) holds %d tokens, want %d", i, c, c.Offset(), n)
		}
	}
	if states != 2 {
		t.Errorf("%d state caches in mlx-lm's file, want the 2 lightning layers'", states)
	}
	got := logitsOf(t, m, caches, ids[n:])
	scale := 0.0
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	if d := largestDiff(got, want) / scale; d > 1e-4 {
		t.Errorf("continued from mlx-lm's caches, the logits differ from mlx-lm's by %g of their scale", d)
	}
}
