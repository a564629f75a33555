package nn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// save writes tensors (built on a graph) to dir/name.
func save(t *testing.T, dir, name string, build func(g *mlx.Graph) map[string]*mlx.Array) {
	t.Helper()
	g := mlx.NewGraph(nil)
	defer g.Close()
	if err := mlx.SaveSafetensors(filepath.Join(dir, name), build(g), nil); err != nil {
		t.Fatal(err)
	}
}

func ones(g *mlx.Graph, dt mlx.Dtype, shape ...int) *mlx.Array { return g.Ones(shape, dt) }

func TestWeightsShardsAndErrors(t *testing.T) {
	dir := t.TempDir()
	save(t, dir, "model-00001-of-00002.safetensors", func(g *mlx.Graph) map[string]*mlx.Array {
		return map[string]*mlx.Array{"a.weight": ones(g, mlx.BFloat16, 4, 3), "n.weight": ones(g, mlx.Float32, 3)}
	})
	save(t, dir, "model-00002-of-00002.safetensors", func(g *mlx.Graph) map[string]*mlx.Array {
		return map[string]*mlx.Array{"model.layers.0.b.weight": ones(g, mlx.Float32, 2, 3), "model.layers.0.ids": ones(g, mlx.Int32, 2)}
	})
	index := `{"weight_map": {"a.weight": "model-00001-of-00002.safetensors", "model.layers.0.b.weight": "model-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(index), 0o644)

	w, err := OpenWeights(dir, []byte(`{}`), Options{Dtype: mlx.Float16})
	if err != nil {
		t.Fatal(err)
	}
	w.Linear("a", 4, 3, false)
	w.RMSNormOnePlus("n", 3, 1e-5)
	lw := w.Layer("model.layers", 0)
	lw.Linear("b", 3, 3, true)
	lw.Embedding("ids", 2, 1)
	params, err := w.Finish()
	if err == nil {
		params.Free()
		t.Fatal("Finish succeeded")
	}
	want := "layer 0: b.weight: shape [2 3], want [3 3]\n" +
		"layer 0: missing b.bias\n" +
		"layer 0: missing ids.weight\n" +
		"layer 0: unexpected ids"
	if err.Error() != want {
		t.Fatalf("errors:\n%v\nwant:\n%s", err, want)
	}

	// The good part loads, cast to float16; gemma's norm holds 1 + w.
	w, err = OpenWeights(dir, []byte(`{}`), Options{Dtype: mlx.Float16})
	if err != nil {
		t.Fatal(err)
	}
	a := w.Linear("a", 4, 3, false)
	n := w.RMSNormOnePlus("n", 3, 1e-5)
	w.Layer("model.layers", 0).Linear("b", 2, 3, false)
	w.DropContaining(".ids")
	params, err = w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	defer params.Free()
	if a.Weight.Dtype() != mlx.Float16 || n.Weight.Dtype() != mlx.Float16 {
		t.Errorf("dtypes %s %s, want float16", a.Weight.Dtype(), n.Weight.Dtype())
	}
	if v, _ := n.Weight.Float32s(); v[0] != 2 {
		t.Errorf("1 + w = %v", v)
	}

	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	if _, err := OpenWeights(dir, []byte(`{}`), Options{}); err == nil || !strings.Contains(err.Error(), "names model-00002-of-00002.safetensors") {
		t.Errorf("missing shard: %v", err)
	}
	if _, err := OpenWeights(t.TempDir(), []byte(`{}`), Options{}); err == nil || !strings.Contains(err.Error(), "no model.safetensors") {
		t.Errorf("empty dir: %v", err)
	}
}

func TestWeightsQuantized(t *testing.T) {
	dir := t.TempDir()
	save(t, dir, "model.safetensors", func(g *mlx.Graph) map[string]*mlx.Array {
		w := g.Normal([]int{8, 64}, mlx.Float32, 0, 1, nil)
		q4 := g.Quantize(w, 32, 4)
		q8 := g.Quantize(w, 64, 8)
		return map[string]*mlx.Array{
			"p.weight": q4.Weight, "p.scales": q4.Scales, "p.biases": q4.Biases,
			"e.weight": q8.Weight, "e.scales": q8.Scales, "e.biases": q8.Biases,
			"d.weight":   w,
			"off.weight": q4.Weight, "off.scales": q4.Scales, "off.biases": q4.Biases,
		}
	})
	config := []byte(`{"quantization": {"group_size": 64, "bits": 4, "off": false}}`)
	w, err := OpenWeights(dir, config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := w.Linear("p", 8, 64, false)
	e := w.Embedding("e", 8, 64)
	d := w.Linear("d", 8, 64, false)
	w.Linear("off", 8, 64, false)
	_, err = w.Finish()
	want := "off.weight: dtype uint32, want a float dtype (a quantized tensor, but config.json's quantization block does not quantize this module)\n" +
		"unexpected tensor off.biases\nunexpected tensor off.scales"
	if err == nil || err.Error() != want {
		t.Fatalf("errors:\n%v\nwant:\n%s", err, want)
	}
	if p.Q == nil || p.Q.GroupSize != 32 || p.Q.Bits != 4 {
		t.Errorf("p: %+v, want inferred group 32, 4 bits", p.Q)
	}
	if e.Q == nil || e.Q.GroupSize != 64 || e.Q.Bits != 8 {
		t.Errorf("e: %+v, want inferred group 64, 8 bits", e.Q)
	}
	if d.Q != nil || d.Weight == nil {
		t.Errorf("d is dense")
	}

	rec, _ := RecordWeights([]byte(`{"quantization": {"group_size": 64, "bits": 4, "lm_head": false}}`))
	rec.Linear("lm_head", 8, 64, false)
	rec.Linear("odd", 8, 48, true)
	rec.Embedding("model.embed_tokens", 8, 64)
	specs := rec.Specs()
	if len(specs) != 4 || specs[0].Quant != nil || specs[1].Quant != nil || specs[3].Quant == nil || specs[3].Quant.Bits != 4 {
		t.Errorf("recorded %+v", specs)
	}
}

// TestParseDtype: the compute dtypes a command line names, and the message
// for any other name.
func TestParseDtype(t *testing.T) {
	for name, want := range map[string]mlx.Dtype{"float32": mlx.Float32, "bfloat16": mlx.BFloat16,
		"float16": mlx.Float16, "checkpoint": CheckpointDtype} {
		if got, err := ParseDtype(name); err != nil || got != want {
			t.Errorf("ParseDtype(%q) = %v, %v, want %v", name, got, err, want)
		}
	}
	for _, name := range []string{"int8", "float64", "", "fp32"} {
		_, err := ParseDtype(name)
		if want := `dtype "` + name + `": want float32, bfloat16, float16 or checkpoint`; err == nil || err.Error() != want {
			t.Errorf("ParseDtype(%q): %v, want %q", name, err, want)
		}
	}
}
