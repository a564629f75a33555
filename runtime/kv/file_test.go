package kv

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// feed runs steps of the given sizes through c with random keys and values
// [1, 2, n, 64] drawn from seed.
func feed(t testing.TB, c Cache, seed uint64, sizes ...int) Cache {
	t.Helper()
	g := mlx.NewGraph(nil)
	defer g.Close()
	key := g.RandomKey(seed)
	for _, n := range sizes {
		var kk, kv *mlx.Array
		key, kk = g.RandomSplit(key)
		key, kv = g.RandomSplit(key)
		k := g.Normal([]int{1, 2, n, 64}, mlx.Float32, 0, 1, kk)
		v := g.Normal([]int{1, 2, n, 64}, mlx.Float32, 0, 1, kv)
		out := c.Update(g, k, v)
		if err := g.Eval(kvArrays(out)...); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// kvArrays lists the arrays of a KV.
func kvArrays(kv KV) []*mlx.Array {
	if kv.QKeys != nil {
		return []*mlx.Array{kv.QKeys.Weight, kv.QKeys.Scales, kv.QKeys.Biases, kv.QValues.Weight, kv.QValues.Scales, kv.QValues.Biases}
	}
	return []*mlx.Array{kv.Keys, kv.Values}
}

func freeAll(caches []Cache) {
	for _, c := range caches {
		c.Free()
	}
}

// mixedCaches are caches of every kind mlx-lm also has, in assorted states:
// wrapped rings, pinned positions, quantized, empty, a pending switch to
// quantized, and more than ten layers.
func mixedCaches(t *testing.T) []Cache {
	caches := []Cache{
		feed(t, NewPlain(), 1, 5, 1, 1),
		feed(t, NewRotating(8, 0), 2, 5, 1, 1, 1, 1, 1, 1),
		feed(t, NewRotating(8, 2), 3, 12),
		feed(t, NewQuantized(8, 64), 4, 5, 1),
		NewPlain(),
		feed(t, NewRotating(8, 2), 5, 3, 1),
		feed(t, NewPlain().Quantize(Quantization{Bits: 4, Start: 100}), 6, 4),
		feed(t, NewQuantized(4, 64), 7, 300),
	}
	for i := range 4 {
		caches = append(caches, feed(t, NewPlain(), uint64(10+i), 2+i))
	}
	return caches
}

// TestSaveReadByMLXLM saves caches of mlx-lm's kinds, has mlx-lm's
// load_prompt_cache read the file and continue each layer, and continues
// ours alike: every key and value must agree.
func TestSaveReadByMLXLM(t *testing.T) {
	caches := mixedCaches(t)
	defer freeAll(caches)
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.safetensors")
	if err := Save(path, caches, map[string]string{"model": "tiny"}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "next.safetensors")
	runRefs(t, "load", path, out)
	arrays, meta := loadRefs(t, out)
	var layers []refLayer
	if err := json.Unmarshal([]byte(meta["layers"]), &layers); err != nil {
		t.Fatal(err)
	}
	var md map[string]string
	if err := json.Unmarshal([]byte(meta["metadata"]), &md); err != nil {
		t.Fatal(err)
	}
	if md["model"] != "tiny" {
		t.Fatalf("mlx-lm read metadata %v", md)
	}
	continueLayers(t, caches, arrays, layers)
}

// TestSaveLoadRoundTrip saves and loads caches of every kind, the
// quantized rotating cache mlx-lm lacks and a pending switch to quantized
// included, and checks that the loaded caches continue exactly as the
// saved ones do.
func TestSaveLoadRoundTrip(t *testing.T) {
	caches := mixedCaches(t)
	caches = append(caches,
		feed(t, NewRotating(8, 2).Quantize(Quantization{Bits: 8}), 20, 5, 1, 1, 1, 1, 1),
		feed(t, NewRotating(6, 0).Quantize(Quantization{Bits: 4, Start: 5}), 21, 4),
		feed(t, NewPlain().Quantize(Quantization{Bits: 8, GroupSize: 32, Start: 6}), 22, 5),
	)
	defer freeAll(caches)
	path := filepath.Join(t.TempDir(), "cache.safetensors")
	meta := map[string]string{"model": "tiny", "tokens": "1 2 3"}
	if err := Save(path, caches, meta); err != nil {
		t.Fatal(err)
	}
	loaded, gotMeta, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer freeAll(loaded)
	if !mapsEqual(gotMeta, meta) {
		t.Fatalf("metadata %v, want %v", gotMeta, meta)
	}
	if len(loaded) != len(caches) {
		t.Fatalf("%d caches loaded, %d saved", len(loaded), len(caches))
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	for i := range caches {
		a, b := caches[i], loaded[i]
		if a.Offset() != b.Offset() {
			t.Fatalf("layer %d: offset %d loaded as %d", i, a.Offset(), b.Offset())
		}
		// Two decode steps (the pending switches happen here) and a prefill.
		for j, n := range []int{1, 1, 3} {
			g.Reset()
			key := g.RandomKey(uint64(100*i + j))
			k1, k2 := g.RandomSplit(key)
			k := g.Normal([]int{1, 2, n, 64}, mlx.Float32, 0, 1, k1)
			v := g.Normal([]int{1, 2, n, 64}, mlx.Float32, 0, 1, k2)
			wantKV := a.Update(g, k, v)
			gotKV := b.Update(g, k, v)
			if err := g.Eval(append(kvArrays(wantKV), kvArrays(gotKV)...)...); err != nil {
				t.Fatalf("layer %d step %d: %v", i, j, err)
			}
			want, got := kvArrays(wantKV), kvArrays(gotKV)
			if len(want) != len(got) {
				t.Fatalf("layer %d step %d: %d arrays, the saved cache gives %d", i, j, len(got), len(want))
			}
			for p := range want {
				sameArray(t, fmt.Sprintf("layer %d step %d", i, j), got[p], want[p])
			}
		}
	}
}

// TestLoadErrors checks that damaged files are refused with messages that
// name the file, the layer and the tensor.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	caches := []Cache{feed(t, NewPlain(), 1, 3), feed(t, NewQuantized(8, 64), 2, 3)}
	defer freeAll(caches)
	if err := Save(good, caches, nil); err != nil {
		t.Fatal(err)
	}
	arrays, meta, err := mlx.LoadSafetensors(good, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, a := range arrays {
			a.Free()
		}
	}()
	cases := []struct {
		name string
		edit func(a map[string]*mlx.Array, m map[string]string)
		want string
		sum  bool // keep the checksum Save recorded
	}{
		{"altered tensor", func(a map[string]*mlx.Array, m map[string]string) { a["0.2"] = scalarArray(t, 2) },
			"its tensors do not match the checksum in its metadata", true},
		{"checksum of another file", func(a map[string]*mlx.Array, m map[string]string) { m["0."+checksumKey] = "1234abcd" },
			"(CRC-32C", true},
		{"no classes", func(a map[string]*mlx.Array, m map[string]string) { delete(m, "1.0"); delete(m, "1.1") }, "no cache classes", false},
		{"gap", func(a map[string]*mlx.Array, m map[string]string) { m["1.3"] = "KVCache" }, "not for layer 2", false},
		{"unknown class", func(a map[string]*mlx.Array, m map[string]string) { m["1.1"] = "MambaCache" }, "layer 1 (MambaCache): unknown cache class", false},
		{"missing tensor", func(a map[string]*mlx.Array, m map[string]string) { delete(a, "1.1.2") }, `layer 1 (QuantizedKVCache): missing tensor "1.1.2"`, false},
		{"missing scalar", func(a map[string]*mlx.Array, m map[string]string) { delete(a, "0.2") }, `layer 0 (KVCache): missing scalar "0.2"`, false},
		{"bad bits", func(a map[string]*mlx.Array, m map[string]string) { a["1.4"] = scalarArray(t, 7) }, "7-bit", false},
		{"offset too big", func(a map[string]*mlx.Array, m map[string]string) { a["0.2"] = scalarArray(t, 9) }, "offset 9 outside the 3 positions", false},
		{"wrong rank", func(a map[string]*mlx.Array, m map[string]string) { a["0.0"] = a["0.2"] }, `tensor "0.0": shape [], not [B, Hkv, N, D]`, false},
		{"bad pending", func(a map[string]*mlx.Array, m map[string]string) { m["0.kv_quantize_0"] = "bits=9" }, "not a KV quantization", false},
		{"integer keys", func(a map[string]*mlx.Array, m map[string]string) { a["0.0"] = a["1.0.0"] },
			`layer 0 (KVCache): tensor "0.0": dtype uint32, want float32, bfloat16 or float16`, false},
		{"integer scales", func(a map[string]*mlx.Array, m map[string]string) { a["1.1.1"] = a["1.1.0"] },
			`layer 1 (QuantizedKVCache): tensor "1.1.1": dtype uint32, want float32, bfloat16 or float16`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := map[string]*mlx.Array{}
			for k, v := range arrays {
				a[k] = v
			}
			m := map[string]string{}
			for k, v := range meta {
				m[k] = v
			}
			if !tc.sum {
				// the layout's own checks, as on a file without a
				// checksum (mlx-lm's)
				delete(m, "0."+checksumKey)
			}
			tc.edit(a, m)
			path := filepath.Join(dir, "bad.safetensors")
			writeRaw(t, path, a, m)
			_, _, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load: %v; want an error naming %s and saying %q", err, path, tc.want)
			}
		})
	}
	if _, _, err := Load(filepath.Join(dir, "absent.safetensors")); err == nil {
		t.Fatal("loading a missing file succeeded")
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.safetensors"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(filepath.Join(dir, "junk.safetensors")); err == nil {
		t.Fatal("loading junk succeeded")
	}
	if err := Save(filepath.Join(dir, "x.safetensors"), caches, map[string]string{"kv_quantize_0": "x"}); err == nil {
		t.Fatal("a reserved metadata key was accepted")
	}
	if err := Save(filepath.Join(dir, "x.safetensors"), caches, map[string]string{checksumKey: "x"}); err == nil {
		t.Fatal("the checksum's metadata key was accepted from the caller")
	}

	// A file cut short is refused naming it.
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.safetensors")
	if err := os.WriteFile(cut, data[:len(data)-9], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(cut); err == nil || !strings.Contains(err.Error(), cut) {
		t.Fatalf("Load of a cut file: %v; want an error naming %s", err, cut)
	}
}

// TestSaveAtomically: Save replaces a file whole, through a temporary
// file beside it that does not outlive the save, and a save that cannot
// land leaves nothing behind.
func TestSaveAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.safetensors")
	one := []Cache{feed(t, NewPlain(), 1, 3)}
	two := []Cache{feed(t, NewPlain(), 2, 5), feed(t, NewPlain(), 3, 5)}
	defer freeAll(one)
	defer freeAll(two)
	if err := Save(path, one, map[string]string{"v": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := Save(path, two, map[string]string{"v": "2"}); err != nil {
		t.Fatal(err)
	}
	caches, meta, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	freeAll(caches)
	if len(caches) != 2 || meta["v"] != "2" {
		t.Fatalf("after the second save: %d layers, metadata %v", len(caches), meta)
	}
	if _, ok := meta[checksumKey]; ok {
		t.Fatal("the checksum shows in the caller's metadata")
	}
	md, err := ReadMetadata(path)
	if err != nil || md["v"] != "2" || md[checksumKey] != "" {
		t.Fatalf("ReadMetadata: %v, %v", md, err)
	}
	// a path that is a folder with a file in it: the rename fails
	blocked := filepath.Join(dir, "blocked.safetensors")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Save(blocked, one, nil); err == nil {
		t.Fatal("a save over a folder succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 2 {
		t.Fatalf("the folder holds %v; want the cache and the blocked path alone", names)
	}
}

func scalarArray(t *testing.T, v int32) *mlx.Array {
	a, err := mlx.NewArray([]int32{v})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Free)
	return a
}

func writeRaw(t *testing.T, path string, a map[string]*mlx.Array, m map[string]string) {
	t.Helper()
	if err := mlx.SaveSafetensors(path, a, m); err != nil {
		t.Fatal(err)
	}
}
