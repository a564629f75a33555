package mlx

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/internal/npy"
)

func TestSafetensorsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "w.safetensors")
	g := NewGraph(nil)
	defer g.Close()
	x := g.Reshape(g.Arange(0, 12, 1, Float32), 3, 4)
	arrays := map[string]*Array{
		"a.f32":  x,
		"b.bf16": g.AsType(x, BFloat16),
		"c.f16":  g.AsType(x, Float16),
		"d.i32":  g.Arange(0, 5, 1, Int32),
		"e.u32":  g.AsType(g.Arange(0, 3, 1, Int32), Uint32),
		"f.bool": g.Greater(g.Arange(0, 4, 1, Int32), g.Scalar(1, Int32)),
		"g.view": g.Transpose(x), // not contiguous: saved in its logical order
	}
	if err := g.Eval(slices.Collect(mapValues(arrays))...); err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{"format": "mlx", "note": "round trip"}
	if err := SaveSafetensors(p, arrays, meta); err != nil {
		t.Fatal(err)
	}
	hdr, err := ReadSafetensorsHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(hdr.Tensors) != len(arrays) || hdr.Tensors[0].Name != "a.f32" || hdr.Metadata["note"] != "round trip" {
		t.Fatalf("header: %+v", hdr)
	}
	got, gotMeta, err := LoadSafetensors(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, a := range got {
			a.Free()
		}
	}()
	if gotMeta["format"] != "mlx" || gotMeta["note"] != "round trip" {
		t.Fatalf("metadata %v", gotMeta)
	}
	for name, want := range arrays {
		a := got[name]
		if a == nil {
			t.Fatalf("%s missing", name)
		}
		if a.Dtype() != want.Dtype() || !slices.Equal(a.Shape(), want.Shape()) {
			t.Fatalf("%s: %s %v, want %s %v", name, a.Dtype(), a.Shape(), want.Dtype(), want.Shape())
		}
		wb, _ := want.Bytes()
		gb, err := a.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(wb, gb) {
			t.Fatalf("%s: bytes differ", name)
		}
	}
	// The view went out as its logical (transposed) contents.
	v, _ := got["g.view"].Float32s()
	if v[1] != 4 || v[3] != 1 {
		t.Fatalf("transposed view saved as %v", v)
	}
}

// TestSafetensorsLazy: loading maps a file without reading its tensors;
// their bytes arrive when they are evaluated.
func TestSafetensorsLazy(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.safetensors")
	g := NewGraph(nil)
	big := g.Zeros([]int{1 << 22}, Float32) // 16 MiB
	if err := g.Eval(big); err != nil {
		t.Fatal(err)
	}
	if err := SaveSafetensors(p, map[string]*Array{"big": big}, nil); err != nil {
		t.Fatal(err)
	}
	g.Close()
	before := ActiveMemory()
	arrays, _, err := LoadSafetensors(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer arrays["big"].Free()
	if grew := ActiveMemory() - before; grew >= 1<<22 {
		t.Fatalf("loading took %d bytes before any evaluation", grew)
	}
	if err := Eval(arrays["big"]); err != nil {
		t.Fatal(err)
	}
	if grew := ActiveMemory() - before; grew < 1<<24 {
		t.Fatalf("evaluating the tensor took only %d bytes", grew)
	}
}

func mapValues(m map[string]*Array) func(func(*Array) bool) {
	return func(yield func(*Array) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestGGUF loads a file written by llama.cpp's gguf library: plain and
// quantized tensors (Q8_0, Q4_0 and Q4_1 arrive as MLX quantized triples
// with groups of 32) and each kind of metadata.
func TestGGUF(t *testing.T) {
	dir := t.TempDir()
	runPython(t, "testdata/gguf_write.py", dir)
	arrays, meta, err := LoadGGUF(filepath.Join(dir, "test.gguf"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, a := range arrays {
			a.Free()
		}
		for _, v := range meta {
			v.Array.Free()
		}
	}()
	g := NewGraph(nil)
	defer g.Close()
	for name, bits := range map[string]int{"f32": 0, "f16": 0, "q8_0": 8, "q4_0": 4, "q4_1": 4} {
		t.Run(name, func(t *testing.T) {
			want, err := npy.ReadFile(filepath.Join(dir, name+".npy"))
			if err != nil {
				t.Fatal(err)
			}
			w := arrays[name+".weight"]
			if w == nil {
				t.Fatalf("no %s.weight among %d arrays", name, len(arrays))
			}
			if bits > 0 {
				q := Quantized{Weight: w, Scales: arrays[name+".scales"], Biases: arrays[name+".biases"], GroupSize: 32, Bits: bits}
				w = g.Dequantize(q, Float32)
			} else {
				w = g.AsType(w, Float32)
			}
			if err := g.Eval(w); err != nil {
				t.Fatal(err)
			}
			compare(t, w, want, Float32, 1e-3)
		})
	}
	if v := meta["test.name"]; v.Kind != GGUFString || v.String != "tiny" {
		t.Errorf("test.name: %+v", v)
	}
	if v := meta["test.words"]; v.Kind != GGUFStrings || !slices.Equal(v.Strings, []string{"a", "bc", "def"}) {
		t.Errorf("test.words: %+v", v)
	}
	if v := meta["test.count"]; v.Kind != GGUFArray {
		t.Errorf("test.count: %+v", v)
	} else if n, err := v.Array.Item(); err != nil || n != 7 {
		t.Errorf("test.count = %v %v", n, err)
	}
	if v := meta["test.numbers"]; v.Kind != GGUFArray {
		t.Errorf("test.numbers: %+v", v)
	} else if n, err := v.Array.Int32s(); err != nil || !slices.Equal(n, []int32{3, 1, 4}) {
		t.Errorf("test.numbers = %v %v", n, err)
	}
	// A file that is not GGUF is an error, not a crash.
	bad := filepath.Join(dir, "bad.gguf")
	os.WriteFile(bad, []byte("GGUF but not really"), 0o644)
	if _, _, err := LoadGGUF(bad, nil); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("bad gguf: %v", err)
	}
}

// TestExternalModule builds a program in a module of its own that imports
// runtime/mlx from a copy of this module without .deps, so it finds libmlx
// only through the documented step: the flags `make setup` writes to
// .deps/cgo.env.
func TestExternalModule(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(root, ".deps/cgo.env"))
	if err != nil {
		t.Fatalf("%v: run `make setup`", err)
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "archgen")
	for _, f := range []string{"go.mod", "go.sum"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			copyFile(t, filepath.Join(root, f), filepath.Join(src, f))
		}
	}
	matches, _ := filepath.Glob(filepath.Join(root, "runtime/mlx/*"))
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && !st.IsDir() && !strings.HasSuffix(m, "_test.go") {
			copyFile(t, m, filepath.Join(src, "runtime/mlx", filepath.Base(m)))
		}
	}
	app := filepath.Join(tmp, "app")
	os.MkdirAll(app, 0o755)
	os.WriteFile(filepath.Join(app, "go.mod"), []byte(`module example.com/app

go 1.26

require github.com/archgen/archgen v0.0.0

replace github.com/archgen/archgen => ../archgen
`), 0o644)
	os.WriteFile(filepath.Join(app, "main.go"), []byte(`package main

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

func main() {
	g := mlx.NewGraph(nil)
	defer g.Close()
	y := g.Sum(g.Arange(1, 5, 1, mlx.Float32), false)
	if err := g.Eval(y); err != nil {
		panic(err)
	}
	v, _ := y.Item()
	fmt.Println("sum", v)
}
`), 0o644)
	script := string(env) + "\ncd " + app + " && go run .\n"
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("external build: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "sum 10") {
		t.Fatalf("external program printed %q", out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
