package gguf

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/internal/npy"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// The cases come from testdata/make_gguf.py: tiny mlx-lm models and their
// GGUF files written with llama.cpp's gguf library, with the tensors as
// that library reads them back. The test reads each GGUF, checks every
// tensor and the config against them, writes the model directory, and has
// testdata/check_dirs.py load it with mlx-lm and compare logits and
// tokenizer with the references.

func python(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../.deps/py/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	return p
}

func run(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(python(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	t.Logf("%s", out)
}

var kinds = []string{"F32", "F16", "Q8_0", "Q4_0", "Q4_1"}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	run(t, "testdata/make_gguf.py", dir)
	cases, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(cases) == 0 {
		t.Fatal("no cases made")
	}
	for _, c := range cases {
		var hf map[string]any
		b, err := os.ReadFile(filepath.Join(c, "hf", "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(b, &hf)
		for _, kind := range kinds {
			t.Run(filepath.Base(c)+"/"+kind, func(t *testing.T) {
				m, err := Read(filepath.Join(c, "model-"+kind+".gguf"), nil, registry.Archs())
				if err != nil {
					t.Fatal(err)
				}
				defer m.Free()
				checkConfig(t, m.Config, hf)
				checkTensors(t, m, filepath.Join(c, "expected-"+kind+".safetensors"), kind)
				out := filepath.Join(c, "out-"+kind)
				if err := m.WriteDir(out); err != nil {
					t.Fatal(err)
				}
				writeGoLogits(t, filepath.Join(c, "model-"+kind+".gguf"), filepath.Join(out, "go_logits.npy"))
			})
		}
	}
	run(t, "testdata/check_dirs.py", dir)
}

// tokens is the prompt check_dirs.py runs too.
var tokens = []int32{5, 60, 61, 62, 100, 200, 7, 8, 9, 10, 150, 250}

// writeGoLogits runs the GGUF file through its generated architecture, in
// the checkpoint's own dtypes as mlx-lm computes it, and saves the logits,
// for check_dirs.py to compare with mlx-lm's on the directory WriteDir
// wrote.
func writeGoLogits(t *testing.T, path, out string) {
	t.Helper()
	v, shape, _ := fileLogits(t, path, nn.Options{Dtype: nn.CheckpointDtype}, tokens)
	if err := npy.WriteFile(out, npy.Array{Shape: shape, Data: v}); err != nil {
		t.Fatal(err)
	}
}

// fileLogits runs the GGUF file at path with opts on ids: the logits as
// float32 and their shape, and the model's Info.
func fileLogits(t *testing.T, path string, opts nn.Options, ids []int32) ([]float32, []int, nn.Info) {
	t.Helper()
	m, err := Read(path, nil, registry.Archs())
	if err != nil {
		t.Fatal(err)
	}
	model, err := m.Load(opts, registry.Load)
	if err != nil {
		t.Fatal(err)
	}
	defer model.Free()
	v, shape := modelLogits(t, model, ids)
	return v, shape, model.Info()
}

// modelLogits runs ids through model from an empty cache: the float32
// logits and their shape.
func modelLogits(t *testing.T, model nn.Model, ids []int32) ([]float32, []int) {
	t.Helper()
	g := mlx.NewGraph(nil)
	defer g.Close()
	logits := g.AsType(model.Forward(g, mlx.FromSlice(g, ids, 1, len(ids)), model.NewCaches()), mlx.Float32)
	if err := g.Eval(logits); err != nil {
		t.Fatal(err)
	}
	v, err := logits.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v, logits.Shape()
}

func checkConfig(t *testing.T, got, hf map[string]any) {
	t.Helper()
	for _, k := range []string{"model_type", "hidden_size", "num_hidden_layers", "intermediate_size",
		"num_attention_heads", "num_key_value_heads", "rms_norm_eps", "vocab_size",
		"max_position_embeddings", "rope_theta", "tie_word_embeddings", "head_dim", "bos_token_id", "eos_token_id"} {
		want, ok := hf[k]
		if !ok {
			continue
		}
		g, _ := json.Marshal(got[k])
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Errorf("config %s = %s, want %s", k, g, w)
		}
	}
}

func checkTensors(t *testing.T, m *Model, expectedPath, kind string) {
	t.Helper()
	want, _, err := mlx.LoadSafetensors(expectedPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, a := range want {
			a.Free()
		}
	}()
	var plain []string
	for n := range m.Tensors {
		if !strings.HasSuffix(n, ".scales") && !strings.HasSuffix(n, ".biases") {
			plain = append(plain, n)
		}
	}
	if got, w := slices.Sorted(slices.Values(plain)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
		t.Fatalf("tensors %v, want %v", got, w)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	quant, _ := m.Config["quantization"].(map[string]any)
	for _, n := range plain {
		a := m.Tensors[n]
		module := strings.TrimSuffix(n, ".weight")
		// F32 tensors come through unchanged, F16 ones as they are stored,
		// and the block-quantized ones decode to the gguf library's own
		// dequantization bit for bit: every tensor exactly. Those in MLX's
		// affine form (Q4_0, Q4_1, Q8_0) hold the same scale, bias and q,
		// and MLX's dequantize computes scale q + bias in float16, their
		// dtype: within float16's relative precision, 2^-10, of the
		// largest value.
		tol := 0.0
		if s, ok := m.Tensors[module+".scales"]; ok {
			bits := quant["bits"].(int)
			if o, ok := quant[module].(map[string]any); ok {
				bits = o["bits"].(int)
			}
			a = g.Dequantize(mlx.Quantized{Weight: a, Scales: s, Biases: m.Tensors[module+".biases"], GroupSize: 32, Bits: bits}, mlx.Float32)
			mx := g.Max(g.Abs(want[n]), false)
			if err := g.Eval(mx); err != nil {
				t.Fatal(err)
			}
			v, _ := mx.Item()
			tol = v / 1024
		} else if mode, ok := moduleMode(quant, module); ok && a.Dtype() == mlx.Uint8 {
			f, _ := mlx.BlockFormatOfMode(mode)
			a = g.BlockDequantize(a, f, mlx.Float32)
		}
		diff := g.Max(g.Abs(g.Subtract(g.AsType(a, mlx.Float32), want[n])), false)
		if err := g.Eval(diff); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if d, _ := diff.Item(); d > tol {
			t.Errorf("%s (%s): max difference %g from the gguf library's values, allowed %g", n, kind, d, tol)
		}
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(filepath.Join(dir, "missing.gguf"), nil, registry.Archs()); err == nil || !strings.Contains(err.Error(), "missing.gguf") {
		t.Fatalf("missing file: %v", err)
	}
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("not a gguf file at all"), 0o644)
	if _, err := Read(junk, nil, registry.Archs()); err == nil || !strings.Contains(err.Error(), junk) {
		t.Fatalf("junk file: %v", err)
	}
}

// TestComputed: gguf.computed's expressions on metadata values, a square
// root of the second key among them, and the values it refuses.
func TestComputed(t *testing.T) {
	md := metadata{path: "f.gguf", raw: map[string]Value{
		"a.width": {Num: 96}, "a.heads": {Num: 4}, "a.layers": {Num: 16}, "a.scale": {Num: 0.25, F32: true},
		"a.odd": {Num: 7}, "a.negative": {Num: -4},
	}}
	for _, c := range []struct {
		expr string
		want any
		err  string
	}{
		{"width / heads", 24, ""},
		{"width - heads", 92, ""},
		{"scale * sqrt(layers)", 1.0, ""},
		{"width / sqrt(layers)", 24, ""},
		{"width / odd", nil, "f.gguf: a.width (96) is not a whole multiple of a.odd (7)"},
		{"scale * sqrt(negative)", nil, `f.gguf: a.negative (-4) is negative: "scale * sqrt(negative)" takes its square root`},
	} {
		v, ok, err := computed(md, "a", c.expr)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: error %v, want %s", c.expr, err, c.err)
			}
			continue
		}
		if err != nil || !ok || v != c.want {
			t.Errorf("%s: %v (%T), %v, %v; want %v (%T)", c.expr, v, v, ok, err, c.want, c.want)
		}
	}
	if _, ok, err := computed(md, "a", "width * sqrt(missing)"); ok || err != nil {
		t.Errorf("a key the file lacks: %v, %v; want no value and no error", ok, err)
	}
}
