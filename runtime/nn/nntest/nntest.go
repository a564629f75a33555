// Package nntest holds the checks every generated architecture's tests
// run: forward passes on tiny random checkpoints written with
// mlx.SaveSafetensors, cached decoding against a full pass, quantized
// loading, the messages of broken checkpoints, and config parsing against
// mlx-lm's own reading of published configs.
package nntest

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// WithKeys is config (a JSON object) with keys set (nil removes one).
func WithKeys(config string, keys map[string]any) []byte {
	var m map[string]any
	if err := json.Unmarshal([]byte(config), &m); err != nil {
		panic(fmt.Sprintf("nntest: config is not a JSON object: %v", err))
	}
	for k, v := range keys {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	out, _ := json.MarshalIndent(m, "", "  ")
	return out
}

// Checkpoint is a random checkpoint in memory: a dense value for every
// tensor of its specs.
type Checkpoint struct {
	Config []byte
	Specs  []nn.TensorSpec
	dense  map[string]*mlx.Array // logical values, float32
}

// Random makes a checkpoint of arch for config with values from seed
// (nn.RandomTensors).
func Random(t testing.TB, arch nn.Arch, config []byte, seed uint64) *Checkpoint {
	t.Helper()
	specs, err := arch.Tensors(config)
	if err != nil {
		t.Fatalf("Tensors: %v", err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	c := &Checkpoint{Config: config, Specs: specs, dense: nn.RandomTensors(g, specs, seed)}
	for _, a := range c.dense {
		g.Keep(a)
	}
	if err := mlx.Eval(c.values()...); err != nil {
		t.Fatalf("random weights: %v", err)
	}
	t.Cleanup(c.free)
	return c
}

func (c *Checkpoint) values() []*mlx.Array {
	out := make([]*mlx.Array, 0, len(c.dense))
	for _, a := range c.dense {
		out = append(out, a)
	}
	return out
}

func (c *Checkpoint) free() {
	for _, a := range c.dense {
		a.Free()
	}
}

// Write writes config.json and model.safetensors of the checkpoint to dir,
// with edit (if any) changing the tensors first.
func (c *Checkpoint) Write(t testing.TB, dir string, dtype mlx.Dtype, dequantized bool, edit func(g *mlx.Graph, tensors map[string]*mlx.Array)) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), c.Config, 0o644); err != nil {
		t.Fatal(err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	tensors := nn.StoredTensors(g, c.Specs, c.dense, dtype, dequantized)
	if edit != nil {
		edit(g, tensors)
	}
	if err := mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
}

// load writes the checkpoint to a temporary directory and loads it.
func load(t testing.TB, arch nn.Arch, c *Checkpoint, stored mlx.Dtype, dequantized bool, opts nn.Options) nn.Model {
	t.Helper()
	dir := t.TempDir()
	c.Write(t, dir, stored, dequantized, nil)
	m, err := arch.Load(dir, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(m.Free)
	return m
}

// tokens is a [B, L] batch of token ids below vocab.
func tokens(B, L, vocab int, seed uint64) ([]int32, *mlx.Array) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ids := make([]int32, B*L)
	for i := range ids {
		ids[i] = int32(r.IntN(vocab))
	}
	a, err := mlx.NewArray(ids, B, L)
	if err != nil {
		panic(err)
	}
	return ids, a
}

// run is one forward pass on a fresh graph: the logits as float32, their
// shape and their dtype (an encoder's hidden states: it has no logits).
func run(t testing.TB, m nn.Model, tok *mlx.Array, caches []kv.Cache) ([]float32, []int, mlx.Dtype) {
	t.Helper()
	g := mlx.NewGraph(nil)
	defer g.Close()
	var out *mlx.Array
	if m.Info().Encoder {
		out = m.Hidden(g, tok, caches)
	} else {
		out = m.Forward(g, tok, caches)
	}
	if err := g.Eval(out); err != nil {
		t.Fatalf("Forward: %v", err)
	}
	v, err := out.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v, out.Shape(), out.Dtype()
}

func freeCaches(caches []kv.Cache) {
	for _, c := range caches {
		c.Free()
	}
}

// forward is run over fresh caches.
func forward(t testing.TB, m nn.Model, tok *mlx.Array) ([]float32, []int, mlx.Dtype) {
	caches := m.NewCaches()
	defer freeCaches(caches)
	return run(t, m, tok, caches)
}

// checkFinite fails on a NaN or infinity, and on logits that are all equal
// (a model that ignores its input).
func checkFinite(t testing.TB, what string, v []float32) {
	t.Helper()
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			t.Fatalf("%s: logit %d is %v", what, i, x)
		}
		lo, hi = min(lo, f), max(hi, f)
	}
	if hi-lo < 1e-6 {
		t.Fatalf("%s: every logit is %v", what, lo)
	}
}

// maxDiff is the largest absolute difference of two equally long slices.
func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func vocabOf(m nn.Model) int { return m.Info().VocabSize }

// Forward loads a random float32 checkpoint of config and runs a batch of
// two sequences: the logits are [2, L, vocab] float32 and finite, and each
// row equals the logits of that sequence run alone. Loaded as bfloat16, the
// logits are bfloat16 and finite.
func Forward(t *testing.T, arch nn.Arch, config string) {
	c := Random(t, arch, []byte(config), 1)
	m := load(t, arch, c, mlx.Float32, false, nn.Options{})
	info := m.Info()
	if info.Layers == 0 || info.VocabSize == 0 || info.Hidden == 0 || info.Nbytes == 0 {
		t.Fatalf("Info: %+v", info)
	}
	const B, L = 2, 5
	ids, tok := tokens(B, L, info.VocabSize, 7)
	defer tok.Free()
	v, shape, dt := forward(t, m, tok)
	if want := []int{B, L, info.VocabSize}; fmt.Sprint(shape) != fmt.Sprint(want) {
		t.Fatalf("logits shape %v, want %v", shape, want)
	}
	if dt != mlx.Float32 {
		t.Fatalf("logits dtype %s, want float32", dt)
	}
	checkFinite(t, "float32", v)
	row := L * info.VocabSize
	for b := range B {
		one, err := mlx.NewArray(ids[b*L:(b+1)*L], 1, L)
		if err != nil {
			t.Fatal(err)
		}
		alone, _, _ := forward(t, m, one)
		one.Free()
		if d := maxDiff(alone, v[b*row:(b+1)*row]); d > 1e-4 {
			t.Fatalf("row %d of the batch differs from the sequence run alone by %g", b, d)
		}
	}

	half := load(t, arch, c, mlx.Float32, false, nn.Options{Dtype: mlx.BFloat16})
	hv, _, hdt := forward(t, half, tok)
	if hdt != mlx.BFloat16 {
		t.Fatalf("logits dtype %s with a bfloat16 compute dtype", hdt)
	}
	checkFinite(t, "bfloat16", hv)
}

// Encode is Forward for an encoder (structure.encoder): a batch of two
// rows, the second padded after its third token, runs through a random
// float32 checkpoint with the padding masked (kv.Encoding): the states are
// [2, L, hidden] float32 and finite, the first row equals its input run
// alone, and the second row's three tokens equal those three run alone.
// Forward fails, naming the model an encoder; loaded as bfloat16, the
// states are bfloat16 and finite.
func Encode(t *testing.T, arch nn.Arch, config string) {
	c := Random(t, arch, []byte(config), 1)
	m := load(t, arch, c, mlx.Float32, false, nn.Options{})
	info := m.Info()
	if !info.Encoder || info.Layers == 0 || info.Hidden == 0 || info.Nbytes == 0 {
		t.Fatalf("Info: %+v", info)
	}
	const B, L, short = 2, 6, 3
	ids, tok := tokens(B, L, info.VocabSize, 7)
	defer tok.Free()
	caches := m.NewCaches()
	e := kv.NewEncoding([]int{L, short}, nil)
	for i := range caches {
		caches[i] = e
	}
	v, shape, dt := run(t, m, tok, caches)
	if want := []int{B, L, info.Hidden}; fmt.Sprint(shape) != fmt.Sprint(want) {
		t.Fatalf("states shape %v, want %v", shape, want)
	}
	if dt != mlx.Float32 {
		t.Fatalf("states dtype %s, want float32", dt)
	}
	checkFinite(t, "float32", v)
	row := L * info.Hidden
	for b, n := range []int{L, short} {
		one, err := mlx.NewArray(ids[b*L:b*L+n], 1, n)
		if err != nil {
			t.Fatal(err)
		}
		alone, _, _ := forward(t, m, one)
		one.Free()
		if d := maxDiff(alone, v[b*row:b*row+n*info.Hidden]); d > 1e-4 {
			t.Fatalf("row %d of the padded batch differs from its input run alone by %g", b, d)
		}
	}
	g := mlx.NewGraph(nil)
	out := m.Forward(g, tok, m.NewCaches())
	err := g.Eval(out)
	g.Close()
	if err == nil || !strings.Contains(err.Error(), "encoder") {
		t.Fatalf("Forward on an encoder: %v, want a refusal naming it an encoder", err)
	}

	half := load(t, arch, c, mlx.Float32, false, nn.Options{Dtype: mlx.BFloat16})
	hv, _, hdt := forward(t, half, tok)
	if hdt != mlx.BFloat16 {
		t.Fatalf("states dtype %s with a bfloat16 compute dtype", hdt)
	}
	checkFinite(t, "bfloat16", hv)
}

// CachedDecode checks that a prefill of three tokens, then one token at a
// time through the same caches, gives the logits of one full pass.
func CachedDecode(t *testing.T, arch nn.Arch, config string) {
	c := Random(t, arch, []byte(config), 2)
	m := load(t, arch, c, mlx.Float32, false, nn.Options{})
	vocab := vocabOf(m)
	const L, prefill = 7, 3
	ids, tok := tokens(1, L, vocab, 11)
	defer tok.Free()
	full, _, _ := forward(t, m, tok)
	caches := m.NewCaches()
	defer freeCaches(caches)
	var got []float32
	for start := 0; start < L; {
		n := 1
		if start == 0 {
			n = prefill
		}
		step, err := mlx.NewArray(ids[start:start+n], 1, n)
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := run(t, m, step, caches)
		step.Free()
		got = append(got, v...)
		start += n
	}
	if d := maxDiff(got, full); d > 1e-4 {
		t.Fatalf("cached decoding differs from the full pass by %g", d)
	}
	for i, cache := range caches {
		if cache.Offset() != L {
			t.Fatalf("cache %d holds %d positions, want %d", i, cache.Offset(), L)
		}
	}
}

// Quantized quantizes every module of a random checkpoint (4 bits, groups
// of 32, as config.json's quantization block says) and checks the logits
// against the same model with the dequantized weights stored dense. The
// tensors whose rows loading rescales when they are dense (arch.UnitRows)
// stay dense in both: their dequantized twin would be rescaled where the
// quantized one is taken as saved.
func Quantized(t *testing.T, arch nn.Arch, config string) {
	qc := WithKeys(config, map[string]any{"quantization": map[string]any{"group_size": 32, "bits": 4}})
	c := Random(t, arch, qc, 3)
	for i, s := range c.Specs {
		if slices.Contains(arch.UnitRows, s.Name) {
			c.Specs[i].Quant = nil
		}
	}
	quantized := 0
	for _, s := range c.Specs {
		if s.Quant != nil {
			quantized++
		}
	}
	if quantized == 0 {
		t.Fatal("no module is quantized")
	}
	qm := load(t, arch, c, mlx.Float32, false, nn.Options{})
	dense := &Checkpoint{Config: []byte(config), Specs: c.Specs, dense: c.dense}
	dm := load(t, arch, dense, mlx.Float32, true, nn.Options{})
	_, tok := tokens(1, 6, vocabOf(qm), 13)
	defer tok.Free()
	qv, _, _ := forward(t, qm, tok)
	dv, _, _ := forward(t, dm, tok)
	checkFinite(t, "quantized", qv)
	// The quantized products differ from the dense ones on the same values
	// by about 2e-5 of their scale (the kernels' own rounding: x taken to 16
	// bits a group on AVX-512); a model of a few layers carries that to
	// under 1e-3 of the logits' scale, and to 1.02e-3 in one whose attention
	// is unscaled over normed heads (scale 1, measured on such a descriptor's test
	// config; 1e-6 there with libmlx's kernel, ARCHGEN_MLX_NATIVE_QMM=0),
	// where a wrong scale, bias, group or bit width moves them by a tenth or
	// more.
	scale := max(1, maxAbs(dv))
	if d := maxDiff(qv, dv); d > 1e-2*scale {
		t.Fatalf("quantized logits differ from the dequantized model's by %g (largest logit %g)", d, scale)
	}
}

// LoadErrors breaks a checkpoint three ways and checks the messages: a
// tensor of layer 1 missing, one misshapen, one unexpected.
func LoadErrors(t *testing.T, arch nn.Arch, config string) {
	c := Random(t, arch, []byte(config), 4)
	var target nn.TensorSpec
	prefix := ""
	for _, s := range c.Specs {
		if i := strings.Index(s.Name, ".1."); i >= 0 && len(s.Shape) == 2 {
			target, prefix = s, s.Name[:i+3]
			break
		}
	}
	if prefix == "" {
		t.Fatal("no 2-D tensor of layer 1 in the specs")
	}
	rel := strings.TrimPrefix(target.Name, prefix)
	cases := []struct {
		name string
		edit func(g *mlx.Graph, ts map[string]*mlx.Array)
		want string
	}{
		{"missing", func(g *mlx.Graph, ts map[string]*mlx.Array) { delete(ts, target.Name) },
			"layer 1: missing " + rel},
		{"shape", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			ts[target.Name] = g.Zeros([]int{target.Shape[0] + 1, target.Shape[1]}, mlx.Float32)
		}, fmt.Sprintf("layer 1: %s: shape [%d %d], want [%d %d]", rel, target.Shape[0]+1, target.Shape[1], target.Shape[0], target.Shape[1])},
		{"unexpected", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			ts[prefix+"extra.weight"] = g.Zeros([]int{2}, mlx.Float32)
			ts["stray.weight"] = g.Zeros([]int{2}, mlx.Float32)
		}, unexpectedWant(prefix+"extra.weight", "stray.weight")},
	}
	for _, tc := range cases {
		dir := t.TempDir()
		c.Write(t, dir, mlx.Float32, false, tc.edit)
		m, err := arch.Load(dir, nn.Options{})
		if err == nil {
			m.Free()
			t.Fatalf("%s: Load succeeded", tc.name)
		}
		if want := dir + ": " + tc.want; err.Error() != want {
			t.Fatalf("%s: error\n%s\nwant\n%s", tc.name, err, want)
		}
	}
}

// unexpectedWant is the loader's message for an unexpected tensor of
// layer 1 (layer, its full name) and a stray one outside every module: one
// line each, in the order of the tensors' names.
func unexpectedWant(layer, stray string) string {
	l := "layer 1: unexpected extra.weight"
	s := "unexpected tensor " + stray
	if stray < layer {
		return s + "\n" + l
	}
	return l + "\n" + s
}

// Tensors checks the specs: names are unique, and every layer holds the
// same tensors.
func Tensors(t *testing.T, arch nn.Arch, config string) {
	specs, err := arch.Tensors([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	perLayer := map[string][]string{}
	for _, s := range specs {
		if seen[s.Name] {
			t.Fatalf("%s is listed twice", s.Name)
		}
		seen[s.Name] = true
		if l, rest, ok := layerOf(s.Name); ok {
			perLayer[l] = append(perLayer[l], rest)
		}
	}
	if len(perLayer) == 0 {
		t.Fatal("no layer tensors")
	}
	// Each module of a layer (attention or another token mixer, the MLP)
	// comes in at most two forms across the layers: dense and sparse MLPs,
	// one form of each mixer. A module name that different kinds share (a
	// single block's mixer: attention, a scan, an MLP) holds sets with no
	// tensor in common, one kind each; each kind is held to two forms.
	forms := map[string]map[string][]string{} // module, its tensors' set: a layer holding them, and the set
	for l, names := range perLayer {
		byModule := map[string][]string{}
		for _, n := range names {
			module, _, _ := strings.Cut(n, ".")
			byModule[module] = append(byModule[module], n)
		}
		for module, ns := range byModule {
			if forms[module] == nil {
				forms[module] = map[string][]string{}
			}
			forms[module][fmt.Sprint(ns)] = append([]string{l}, ns...)
		}
	}
	for module, sets := range forms {
		for _, kind := range kindsOf(sets) {
			if len(kind) > 2 {
				var which []string
				for _, k := range kind {
					which = append(which, fmt.Sprintf("layer %s holds %v", sets[k][0], sets[k][1:]))
				}
				sort.Strings(which)
				t.Fatalf("the layers' %s comes in %d different sets of tensors: %s", module, len(kind), strings.Join(which, "; "))
			}
		}
	}
}

// kindsOf groups sets of tensor names (by their key) into kinds: sets that
// share a name, directly or through others, are one kind.
func kindsOf(sets map[string][]string) [][]string {
	var keys []string
	for k := range sets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var kinds [][]string
	owner := map[string]int{} // tensor name: a kind holding it
	for _, k := range keys {
		into := -1
		for _, n := range sets[k][1:] {
			if o, ok := owner[n]; ok {
				into = o
				break
			}
		}
		if into < 0 {
			into = len(kinds)
			kinds = append(kinds, nil)
		}
		kinds[into] = append(kinds[into], k)
		for _, n := range sets[k][1:] {
			owner[n] = into
		}
	}
	return kinds
}

// layerOf splits a tensor name at its first all-digit component, the
// layer index, whatever the stack's prefix (model.layers.3.mlp.up_proj,
// transformer.h.3.mlp.c_fc_0): the index and the name within the layer.
func layerOf(name string) (layer, rest string, ok bool) {
	parts := strings.Split(name, ".")
	for i, p := range parts[:len(parts)-1] {
		if i > 0 && p != "" && strings.Trim(p, "0123456789") == "" {
			return p, strings.Join(parts[i+1:], "."), true
		}
	}
	return "", "", false
}

// CacheOptions checks NewCachesWith: options no cache can follow are
// refused, and caches bounded to five positions (keeping the first four,
// as mlx-lm's max_kv_size does) decode the first five tokens as a full
// pass does, and keep going with finite logits.
func CacheOptions(t *testing.T, arch nn.Arch, config string) {
	c := Random(t, arch, []byte(config), 5)
	m := load(t, arch, c, mlx.Float32, false, nn.Options{})
	if _, err := m.NewCachesWith(kv.Options{MaxKVSize: 2}); err == nil {
		t.Fatal("a max KV size of 2 was accepted")
	}
	vocab := vocabOf(m)
	const L, bound = 8, 5
	ids, tok := tokens(1, L, vocab, 17)
	defer tok.Free()
	full, _, _ := forward(t, m, tok)
	caches, err := m.NewCachesWith(kv.Options{MaxKVSize: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer freeCaches(caches)
	var got []float32
	for i := range L {
		step, err := mlx.NewArray(ids[i:i+1], 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := run(t, m, step, caches)
		step.Free()
		got = append(got, v...)
	}
	if d := maxDiff(got[:bound*vocab], full[:bound*vocab]); d > 1e-4 {
		t.Fatalf("bounded caches differ from the full pass by %g within the bound", d)
	}
	checkFinite(t, "past the bound", got[bound*vocab:])
}

// Model is a random checkpoint of arch for config (values from seed),
// written in float32 and loaded.
func Model(t testing.TB, arch nn.Arch, config []byte, seed uint64) nn.Model {
	t.Helper()
	return load(t, arch, Random(t, arch, config, seed), mlx.Float32, false, nn.Options{})
}

// maxAbs is the largest magnitude in v.
func maxAbs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}
