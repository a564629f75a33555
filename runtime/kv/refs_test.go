package kv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// The reference data of these tests comes from mlx-lm's own cache classes:
// testdata/gen_refs.py runs once per test binary, into a temporary
// directory, with the venv `make setup` installs.

var refs struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if refs.dir != "" {
		os.RemoveAll(refs.dir)
	}
	os.Exit(code)
}

// python is the venv's interpreter; its absence is a failure (make setup
// installs it), never a skip.
func python(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs("../../.deps/py/bin/python")
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		t.Fatalf("the Python venv with mlx-lm is missing (run make setup): %v", err)
	}
	return p
}

// runRefs runs gen_refs.py with args.
func runRefs(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command(python(t), append([]string{"testdata/gen_refs.py"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen_refs.py %v: %v\n%s", args, err, out)
	}
}

// refsDir is the directory of gen_refs.py's refs output.
func refsDir(t testing.TB) string {
	t.Helper()
	refs.once.Do(func() {
		refs.dir, refs.err = os.MkdirTemp("", "kvrefs")
		if refs.err != nil {
			return
		}
		cmd := exec.Command(python(t), "testdata/gen_refs.py", "refs", refs.dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			refs.err = fmt.Errorf("gen_refs.py refs: %v\n%s", err, out)
		}
	})
	if refs.err != nil {
		t.Fatal(refs.err)
	}
	return refs.dir
}

// loadRefs loads a safetensors file of references; its arrays are freed
// when the test ends.
func loadRefs(t testing.TB, path string) (map[string]*mlx.Array, map[string]string) {
	t.Helper()
	arrays, meta, err := mlx.LoadSafetensors(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, a := range arrays {
			a.Free()
		}
	})
	return arrays, meta
}

func need(t testing.TB, arrays map[string]*mlx.Array, name string) *mlx.Array {
	t.Helper()
	a, ok := arrays[name]
	if !ok {
		t.Fatalf("reference tensor %q is missing", name)
	}
	return a
}

// sameArray fails t unless got and want have the same dtype, shape and
// bytes.
func sameArray(t testing.TB, what string, got, want *mlx.Array) {
	t.Helper()
	if got.Dtype() != want.Dtype() || !slices.Equal(got.Shape(), want.Shape()) {
		t.Fatalf("%s: got %s %v, want %s %v", what, got.Dtype(), got.Shape(), want.Dtype(), want.Shape())
	}
	gb, err := got.Bytes()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	wb, err := want.Bytes()
	if err != nil {
		t.Fatalf("%s: reading the reference: %v", what, err)
	}
	if !bytes.Equal(gb, wb) {
		i := 0
		for i < len(gb) && gb[i] == wb[i] {
			i++
		}
		t.Fatalf("%s: %s %v differs from mlx-lm's from byte %d of %d", what, got.Dtype(), got.Shape(), i, len(gb))
	}
}

// sameKV compares what a cache returned with mlx-lm's parts, named
// prefix+"ok<t>" and prefix+"ov<t>".
func sameKV(t testing.TB, what string, kv KV, arrays map[string]*mlx.Array, prefix string) {
	t.Helper()
	var ks, vs []*mlx.Array
	if kv.QKeys != nil {
		ks = []*mlx.Array{kv.QKeys.Weight, kv.QKeys.Scales, kv.QKeys.Biases}
		vs = []*mlx.Array{kv.QValues.Weight, kv.QValues.Scales, kv.QValues.Biases}
	} else {
		ks, vs = []*mlx.Array{kv.Keys}, []*mlx.Array{kv.Values}
	}
	for _, side := range []struct {
		name string
		got  []*mlx.Array
	}{{"ok", ks}, {"ov", vs}} {
		if _, ok := arrays[fmt.Sprintf("%s%s%d", prefix, side.name, len(side.got))]; ok {
			t.Fatalf("%s: mlx-lm returned more parts than our %d", what, len(side.got))
		}
		for i, a := range side.got {
			name := fmt.Sprintf("%s%s%d", prefix, side.name, i)
			sameArray(t, what+" "+name, a, need(t, arrays, name))
		}
	}
}

type refScenario struct {
	Name  string
	Cache struct {
		Class     string
		MaxSize   int `json:"max_size"`
		Keep      int
		GroupSize int `json:"group_size"`
		Bits      int
	}
	Masks [][2]any
	Steps []struct {
		Op        string
		N         int
		Masks     []string
		Offset    int
		Trimmable bool
		Ret       int
		GroupSize int `json:"group_size"`
		Bits      int
	}
}

// TestMLXLMCaches drives our caches through the steps gen_refs.py drove
// mlx-lm's KVCache, RotatingKVCache and QuantizedKVCache through, with the
// same inputs, and compares every returned key, value and mask exactly.
func TestMLXLMCaches(t *testing.T) {
	arrays, meta := loadRefs(t, filepath.Join(refsDir(t), "refs.safetensors"))
	var scenarios []refScenario
	if err := json.Unmarshal([]byte(meta["scenarios"]), &scenarios); err != nil {
		t.Fatalf("scenarios: %v", err)
	}
	if len(scenarios) == 0 {
		t.Fatal("no scenarios")
	}
	for si, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			var c Cache
			switch sc.Cache.Class {
			case "KVCache":
				c = NewPlain()
			case "RotatingKVCache":
				c = NewRotating(sc.Cache.MaxSize, sc.Cache.Keep)
			case "QuantizedKVCache":
				c = NewQuantized(sc.Cache.Bits, sc.Cache.GroupSize)
			default:
				t.Fatalf("unknown class %q", sc.Cache.Class)
			}
			defer c.Free()
			g := mlx.NewGraph(nil)
			defer g.Close()
			for j, st := range sc.Steps {
				g.Reset()
				p := fmt.Sprintf("%d.%d.", si, j)
				what := fmt.Sprintf("step %d (%s %d)", j, st.Op, st.N)
				switch st.Op {
				case "update":
					for mi, spec := range sc.Masks {
						window := 0
						if w, ok := spec[0].(float64); ok {
							window = int(w)
						}
						forceArray := spec[1].(bool)
						m := c.Mask(g, st.N, window, forceArray)
						kind := m.Mode
						if kind == "" {
							kind = "none"
						}
						if kind != st.Masks[mi] {
							t.Fatalf("%s: mask %v: %q, mlx-lm gives %q", what, spec, kind, st.Masks[mi])
						}
						if kind == "array" {
							sameArray(t, fmt.Sprintf("%s mask %v", what, spec), m.Array, need(t, arrays, fmt.Sprintf("%sm%d", p, mi)))
						}
					}
					kv := c.Update(g, need(t, arrays, p+"k"), need(t, arrays, p+"v"))
					if err := g.Err(); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					sameKV(t, what, kv, arrays, p)
				case "trim":
					if c.Trimmable() != st.Trimmable {
						t.Fatalf("%s: trimmable %v, mlx-lm says %v", what, c.Trimmable(), st.Trimmable)
					}
					if got := c.Trim(st.N); got != st.Ret {
						t.Fatalf("%s: trimmed %d, mlx-lm %d", what, got, st.Ret)
					}
				case "to_quantized":
					// mlx-lm converts between steps; ours converts at the
					// next Update that finds its offset at Start.
					c.(*Plain).Quantize(Quantization{Bits: st.Bits, GroupSize: st.GroupSize, Start: c.Offset()})
				default:
					t.Fatalf("unknown op %q", st.Op)
				}
				if c.Offset() != st.Offset {
					t.Fatalf("%s: offset %d, mlx-lm %d", what, c.Offset(), st.Offset)
				}
			}
		})
	}
}

type refLayer struct {
	Class     string
	Offset    int
	Keep      int
	MaxSize   int `json:"max_size"`
	Idx       int
	GroupSize int `json:"group_size"`
	Bits      int
	Continued bool
}

// continueLayers feeds caches the decode step and the prefill that
// gen_refs.py's continue_layers fed mlx-lm's, and compares the results.
func continueLayers(t *testing.T, caches []Cache, arrays map[string]*mlx.Array, layers []refLayer) {
	t.Helper()
	if len(caches) != len(layers) {
		t.Fatalf("%d caches, mlx-lm has %d", len(caches), len(layers))
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	for i, c := range caches {
		l := layers[i]
		if c.Offset() != l.Offset {
			t.Fatalf("layer %d: offset %d, mlx-lm %d", i, c.Offset(), l.Offset)
		}
		switch c := c.(type) {
		case *Rotating:
			if l.Class != "RotatingKVCache" || c.keep != l.Keep || c.maxSize != l.MaxSize || c.idx != l.Idx {
				t.Fatalf("layer %d: rotating keep %d max %d idx %d, mlx-lm has %+v", i, c.keep, c.maxSize, c.idx, l)
			}
		case *Plain:
			want := "KVCache"
			if c.Quantized() {
				want = "QuantizedKVCache"
				if c.s.bits != l.Bits || c.s.group != l.GroupSize {
					t.Fatalf("layer %d: %d bits in groups of %d, mlx-lm has %+v", i, c.s.bits, c.s.group, l)
				}
			}
			if l.Class != want {
				t.Fatalf("layer %d: %s, mlx-lm has %s", i, want, l.Class)
			}
		}
		if !l.Continued {
			continue
		}
		for j := range 2 {
			g.Reset()
			p := fmt.Sprintf("%d.%d.", i, j)
			kv := c.Update(g, need(t, arrays, p+"k"), need(t, arrays, p+"v"))
			if err := g.Err(); err != nil {
				t.Fatalf("layer %d step %d: %v", i, j, err)
			}
			sameKV(t, fmt.Sprintf("layer %d step %d", i, j), kv, arrays, p)
		}
	}
}

// TestLoadMLXLMFile loads a prompt cache that mlx-lm's save_prompt_cache
// wrote and continues every layer as mlx-lm continues it.
func TestLoadMLXLMFile(t *testing.T) {
	dir := refsDir(t)
	caches, meta, err := Load(filepath.Join(dir, "mlxlm_cache.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	if want := map[string]string{"model": "tiny", "purpose": "test"}; !mapsEqual(meta, want) {
		t.Fatalf("metadata %v, want %v", meta, want)
	}
	arrays, next := loadRefs(t, filepath.Join(dir, "mlxlm_next.safetensors"))
	var layers []refLayer
	if err := json.Unmarshal([]byte(next["layers"]), &layers); err != nil {
		t.Fatal(err)
	}
	continueLayers(t, caches, arrays, layers)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestPromptMask compares PromptMask with mlx-lm's create_attention_mask
// called without a cache.
func TestPromptMask(t *testing.T) {
	arrays, meta := loadRefs(t, filepath.Join(refsDir(t), "refs.safetensors"))
	var cases []struct {
		N      int
		Window *int
		Array  bool
		Kind   string
	}
	if err := json.Unmarshal([]byte(meta["nocache"]), &cases); err != nil || len(cases) == 0 {
		t.Fatalf("nocache: %v (%d cases)", err, len(cases))
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	for i, tc := range cases {
		window := 0
		if tc.Window != nil {
			window = *tc.Window
		}
		m := PromptMask(g, tc.N, window, tc.Array)
		kind := m.Mode
		if kind == "" {
			kind = "none"
		}
		what := fmt.Sprintf("n %d window %d array %v", tc.N, window, tc.Array)
		if kind != tc.Kind {
			t.Fatalf("%s: %q, mlx-lm gives %q", what, kind, tc.Kind)
		}
		if kind == "array" {
			sameArray(t, what, m.Array, need(t, arrays, fmt.Sprintf("nocache.%d", i)))
		}
	}
}
