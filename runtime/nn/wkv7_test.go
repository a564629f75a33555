package nn_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestWKV7WithoutCarriedValues: a time mix that mixes its values toward
// the first layer's, run before any layer carried them, fails the forward
// pass with a message naming the problem; a layer that carries them first
// lets the same layer run.
func TestWKV7WithoutCarriedValues(t *testing.T) {
	const hidden, heads, dim, rank = 8, 2, 4, 2
	g := mlx.NewGraph(nil)
	defer g.Close()
	full := func(v float64, shape ...int) *mlx.Array { return g.Full(shape, v, mlx.Float32) }
	lin := func(out, in int) *nn.Linear { return &nn.Linear{Weight: full(0.1, out, in)} }
	lora := func() *nn.LoRA { return &nn.LoRA{Down: lin(rank, hidden), Up: lin(hidden, rank)} }
	mix := func(first bool, key *nn.Carry) *nn.WKV7 {
		p := &nn.WKV7{
			Heads: heads, HeadDim: dim,
			XR: full(0.5, hidden), XW: full(0.5, hidden), XK: full(0.5, hidden),
			XV: full(0.5, hidden), XA: full(0.5, hidden), XG: full(0.5, hidden),
			KK: full(1, heads, dim), KA: full(1, heads, dim), RK: full(0.1, heads, dim),
			RProj: lin(hidden, hidden), KProj: lin(hidden, hidden), VProj: lin(hidden, hidden), OProj: lin(hidden, hidden),
			WLoRA: lora(), ALoRA: lora(), GLoRA: lora(),
			GNorm: &nn.HeadLayerNorm{Weight: full(1, heads, dim), Bias: full(0, heads, dim), Eps: 64e-5},
			First: first, Carry: key,
		}
		if !first {
			p.VLoRA = lora()
		}
		return p
	}
	x := g.Full([]int{1, 3, hidden}, 0.3, mlx.Float32)
	key := &nn.Carry{Name: "attn.v_first"}
	later := mix(false, key)
	y := later.Apply(g, kv.NewStates(3), x)
	want := "nn: the time mix mixes its values toward the first layer's, and no layer before it carried them"
	if err := g.Eval(y); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want it to contain %q", err, want)
	}
	g2 := mlx.NewGraph(nil)
	defer g2.Close()
	g = g2
	x = g.Full([]int{1, 3, hidden}, 0.3, mlx.Float32)
	first, later := mix(true, key), mix(false, key)
	h := first.Apply(g, kv.NewStates(3), x)
	y = later.Apply(g, kv.NewStates(3), h)
	if err := g.Eval(y); err != nil {
		t.Fatalf("after the first layer: %v", err)
	}
}

// rwkv7Dir is a float32 RWKV-7 checkpoint (mlx-lm's, from the parity
// references): 4 layers of 2 heads of 32.
const rwkv7Dir = "../../testdata/parity/rwkv7/heads32_tied/model"

// TestWKV7FlatLayout: RWKV-7's per-head vectors stored flat (k_k, k_a and
// g_norm's weight and bias [hidden], as a published checkpoint has them
// before mlx-lm's sanitize reshapes them), the time mix's token-shift
// mixes as [hidden] and the channel mix's as [1, 1, hidden] load to the
// same model; a k_k of another size is an
// error naming the tensor and both shapes.
func TestWKV7FlatLayout(t *testing.T) {
	tensors, meta, err := mlx.LoadSafetensors(filepath.Join(rwkv7Dir, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	flat, lifted := 0, 0
	for name, a := range tensors {
		switch {
		case strings.HasSuffix(name, ".k_k") || strings.HasSuffix(name, ".k_a") || strings.Contains(name, ".g_norm.") ||
			strings.Contains(name, ".attn.x_"):
			tensors[name] = g.Reshape(a, a.Size())
			flat++
		case strings.HasSuffix(name, ".ffn.x_k"):
			tensors[name] = g.Reshape(a, 1, 1, a.Size())
			lifted++
		}
	}
	if flat == 0 || lifted == 0 {
		t.Fatalf("%d per-head vectors, %d feed-forward mixes in the checkpoint", flat, lifted)
	}
	sameModel(t, rwkv7Dir, tensors, meta)

	tensors["model.layers.1.attn.k_k"] = g.Zeros([]int{60}, mlx.Float32)
	dir := t.TempDir()
	if err := mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), tensors, meta); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(rwkv7Dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = registry.Load(dir, nn.Options{})
	want := "layer 1: attn.k_k: shape [60], want [2 32]"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want it to contain %q", err, want)
	}
}

// TestWKV7PromptCacheFromMLXLM: caches mlx-lm saved after a prompt of an
// RWKV-7 model (save_prompt_cache: one ArraysCache of three slots a layer,
// the time mix's previous token, its state, the channel mix's previous
// token) load here and continue the prompt as mlx-lm continues it, within
// the float32 tolerance; the same file with the two token-shift slots
// swapped does not, so the slots' order is checked, not only their shapes.
func TestWKV7PromptCacheFromMLXLM(t *testing.T) {
	ids := hybridPrompt(20)
	const n = 14
	file, want := mlxlmPromptCache(t, rwkv7Dir, ids, n)
	m := loadHybrid(t, rwkv7Dir)
	continueFrom := func(swap bool) float64 {
		caches, _, err := kv.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(caches) != len(m.NewCaches()) {
			t.Fatalf("%d caches in mlx-lm's file, want %d", len(caches), len(m.NewCaches()))
		}
		if swap {
			g := mlx.NewGraph(nil)
			for _, c := range caches {
				s := c.(*kv.States)
				a, b := g.Contiguous(s.Slot(0)), g.Contiguous(s.Slot(2))
				s.SetSlot(g, 0, b)
				s.SetSlot(g, 2, a)
			}
			g.Close()
		}
		got := logitsOf(t, m, caches, ids[n:])
		scale := 0.0
		for _, v := range want {
			scale = max(scale, math.Abs(float64(v)))
		}
		return largestDiff(got, want) / scale
	}
	if d := continueFrom(false); d > 1e-4 {
		t.Errorf("continued from mlx-lm's caches, the logits differ from mlx-lm's by %g of their scale", d)
	}
	if d := continueFrom(true); d < 1e-2 {
		t.Errorf("with the token shifts swapped, the logits differ from mlx-lm's by only %g of their scale", d)
	}
}
