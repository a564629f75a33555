// Package gguf reads llama.cpp's GGUF checkpoints into Hugging Face form:
// the config.json mlx-lm would read, the tensors under their Hugging Face
// names, and the tokenizer files. Generated models then load them like any
// other checkpoint, and WriteDir saves them as a model directory that mlx-lm
// loads too.
//
// Tensors are read from the file straight into arrays: F32, F16 and BF16
// as they are, and llama.cpp's block-quantized types (Q4_0 to Q8_0, the
// K-quants Q2_K to Q6_K, IQ4_NL, IQ4_XS, MXFP4) held in their own layout,
// as uint8 rows of blocks that archgen's kernels multiply directly (see
// mlx.BlockFormat), with the config's quantization block naming each
// module's type (mode gguf_q4_k and the like). Any other type is refused,
// naming the tensor, before any data is read.
//
// llama.cpp's converter reorders the rows of the q and k projections of
// llama-family models so that its interleaved rope applies; Read puts them
// back in Hugging Face order (rows, with their scales and biases), so the
// checkpoint runs with the same rope as its safetensors form.
//
// The package knows no architecture: what differs between them (the name
// in the file's metadata, the tensor names, the reordering) comes from each
// architecture's descriptor, as the nn.GGUF of its nn.Arch, which the
// caller hands to Read (registry.Archs() lists them all).
package gguf

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// Model is a GGUF checkpoint in Hugging Face form.
type Model struct {
	Path    string
	Arch    string                // general.architecture
	Config  map[string]any        // config.json
	Tensors map[string]*mlx.Array // Hugging Face names; owned by the Model
	// TokenizerJSON and TokenizerConfig are tokenizer.json and
	// tokenizer_config.json made from the file's vocabulary.
	TokenizerJSON   map[string]any
	TokenizerConfig map[string]any
}

// Free releases the model's tensors.
func (m *Model) Free() {
	for _, a := range m.Tensors {
		a.Free()
	}
	m.Tensors = nil
}

// Supported lists the GGUF architecture names archs can read.
func Supported(archs []nn.Arch) []string {
	var out []string
	for _, a := range archs {
		if a.GGUF != nil {
			out = append(out, a.GGUF.Arch)
		}
	}
	sort.Strings(out)
	return out
}

// find is the architecture whose GGUF name is name.
func find(archs []nn.Arch, name string) (string, *nn.GGUF, bool) {
	for _, a := range archs {
		if a.GGUF != nil && a.GGUF.Arch == name {
			return a.Name, a.GGUF, true
		}
	}
	return "", nil, false
}

// llama.cpp's names of the tensors outside the layers.
const (
	ggufEmbed = "token_embd"
	ggufNorm  = "output_norm"
	ggufHead  = "output"
	ggufQ     = "attn_q" // rows reordered under PermuteQK, by heads
	ggufK     = "attn_k" // by key/value heads
)

var blockName = regexp.MustCompile(`^blk\.(\d+)\.([a-z0-9_]+)\.(weight|bias|scales|biases)$`)
var topName = regexp.MustCompile(`^([a-z0-9_]+)\.(weight|bias|scales|biases)$`)

// Read loads a GGUF file on stream s (the default when nil), as the one of
// archs whose GGUF name the file's general.architecture is.
func Read(path string, s *mlx.Stream, archs []nn.Arch) (*Model, error) {
	hdr, err := ReadHeader(path)
	if err != nil {
		return nil, err
	}
	if err := hdr.check(path, archs); err != nil {
		return nil, err
	}
	tensors, err := readTensors(path, hdr)
	if err != nil {
		return nil, err
	}
	m, err := build(path, tensors, metadata{path: path, raw: hdr.Values}, s, archs)
	if err != nil {
		for _, t := range tensors {
			t.free()
		}
		return nil, err
	}
	return m, nil
}

func build(path string, arrays map[string]tensor, md metadata, s *mlx.Stream, archs []nn.Arch) (*Model, error) {
	name, err := md.str("general.architecture")
	if err != nil {
		return nil, err
	}
	modelType, a, ok := find(archs, name)
	if !ok {
		return nil, fmt.Errorf("%s: GGUF architecture %q is not supported (supported: %v)", path, name, Supported(archs))
	}
	if _, ok := arrays["rope_freqs.weight"]; ok {
		return nil, fmt.Errorf("%s: tensor rope_freqs.weight (llama.cpp's rope frequency factors) is not supported", path)
	}
	cfg, err := config(md, name, modelType, a, arrays)
	if err != nil {
		return nil, err
	}
	tensors, quant, err := rename(path, arrays, a)
	if err != nil {
		return nil, err
	}
	if a.PermuteQK {
		if err := unpermute(tensors, cfg, a, s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if q := quantization(quant); q != nil {
		cfg["quantization"] = q
	}
	tok, tokCfg, err := tokenizerFiles(md, cfg)
	if err != nil {
		return nil, err
	}
	return &Model{Path: path, Arch: name, Config: cfg, Tensors: tensors, TokenizerJSON: tok, TokenizerConfig: tokCfg}, nil
}

// config builds config.json from the file's metadata, under the key names
// the Hugging Face config of the architecture uses.
func config(md metadata, name, modelType string, a *nn.GGUF, arrays map[string]tensor) (map[string]any, error) {
	key := func(k string) string { return name + "." + k }
	cfg := map[string]any{
		"model_type":    modelType,
		"architectures": []string{a.Class},
	}
	ints := []struct{ gguf, hf string }{
		{"embedding_length", "hidden_size"},
		{"feed_forward_length", "intermediate_size"},
		{"block_count", "num_hidden_layers"},
		{"attention.head_count", "num_attention_heads"},
		{"context_length", "max_position_embeddings"},
	}
	for _, k := range ints {
		v, err := md.int(key(k.gguf))
		if err != nil {
			return nil, err
		}
		if v <= 0 {
			return nil, fmt.Errorf("%s: %s is %d", md.path, key(k.gguf), v)
		}
		cfg[k.hf] = v
	}
	heads := cfg["num_attention_heads"].(int)
	kv := heads
	if md.has(key("attention.head_count_kv")) {
		var err error
		if kv, err = md.int(key("attention.head_count_kv")); err != nil {
			return nil, err
		}
	}
	if kv <= 0 || heads%kv != 0 {
		return nil, fmt.Errorf("%s: %d attention heads are not a multiple of %d key/value heads", md.path, heads, kv)
	}
	cfg["num_key_value_heads"] = kv
	hidden := cfg["hidden_size"].(int)
	headDim := hidden / heads
	if md.has(key("attention.key_length")) {
		var err error
		if headDim, err = md.int(key("attention.key_length")); err != nil {
			return nil, err
		}
	}
	if headDim != hidden/heads || a.AlwaysHeadDim {
		cfg["head_dim"] = headDim
	}
	eps, err := md.float(key("attention.layer_norm_rms_epsilon"))
	if err != nil {
		return nil, err
	}
	cfg["rms_norm_eps"] = eps
	theta := 10000.0
	if md.has(key("rope.freq_base")) {
		if theta, err = md.float(key("rope.freq_base")); err != nil {
			return nil, err
		}
	}
	cfg["rope_theta"] = theta
	if md.has(key("rope.scaling.type")) {
		t, err := md.str(key("rope.scaling.type"))
		if err != nil {
			return nil, err
		}
		switch t {
		case "none":
		case "linear", "yarn":
			f, err := md.float(key("rope.scaling.factor"))
			if err != nil {
				return nil, err
			}
			rs := map[string]any{"type": t, "factor": f}
			if md.has(key("rope.scaling.original_context_length")) {
				n, err := md.int(key("rope.scaling.original_context_length"))
				if err != nil {
					return nil, err
				}
				rs["original_max_position_embeddings"] = n
			}
			cfg["rope_scaling"] = rs
		default:
			return nil, fmt.Errorf("%s: %s %q is not supported", md.path, key("rope.scaling.type"), t)
		}
	}
	tokens, err := md.strs("tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	vocab := len(tokens)
	if md.has(key("vocab_size")) {
		if vocab, err = md.int(key("vocab_size")); err != nil {
			return nil, err
		}
	}
	cfg["vocab_size"] = vocab
	_, untied := arrays[ggufHead+".weight"]
	cfg["tie_word_embeddings"] = !untied
	for _, k := range []struct{ gguf, hf string }{
		{"tokenizer.ggml.bos_token_id", "bos_token_id"},
		{"tokenizer.ggml.eos_token_id", "eos_token_id"},
	} {
		if md.has(k.gguf) {
			v, err := md.int(k.gguf)
			if err != nil {
				return nil, err
			}
			cfg[k.hf] = v
		}
	}
	for k, v := range a.Config {
		cfg[k] = v
	}
	for _, k := range slices.Sorted(maps.Keys(a.Keys)) {
		if !md.has(key(k)) {
			continue
		}
		v, err := md.float(key(k))
		if err != nil {
			return nil, err
		}
		cfg[a.Keys[k]] = v
	}
	return cfg, nil
}

// quantSpec is the quantization of one module: its block format.
type quantSpec struct {
	mode         string
	bits, values int
}

// rename maps llama.cpp's tensor names to Hugging Face's and tells each
// block-quantized module's format.
func rename(path string, arrays map[string]tensor, a *nn.GGUF) (map[string]*mlx.Array, map[string]quantSpec, error) {
	out := map[string]*mlx.Array{}
	quant := map[string]quantSpec{}
	topNames := map[string]string{ggufEmbed: a.Embed, ggufNorm: a.Norm, ggufHead: a.Head}
	for _, n := range slices.Sorted(maps.Keys(arrays)) {
		var module, suffix string
		if m := blockName.FindStringSubmatch(n); m != nil {
			hf, ok := a.Tensors[m[2]]
			if !ok {
				return nil, nil, fmt.Errorf("%s: unexpected tensor %s", path, n)
			}
			module, suffix = a.Layers+"."+m[1]+"."+hf, m[3]
		} else if m := topName.FindStringSubmatch(n); m != nil {
			hf, ok := topNames[m[1]]
			if !ok {
				return nil, nil, fmt.Errorf("%s: unexpected tensor %s", path, n)
			}
			module, suffix = hf, m[2]
		} else {
			return nil, nil, fmt.Errorf("%s: unexpected tensor %s", path, n)
		}
		t := arrays[n]
		out[module+"."+suffix] = t.array
		if t.scales != nil {
			if suffix != "weight" {
				return nil, nil, fmt.Errorf("%s: tensor %s is quantized, which archgen reads for weights only", path, n)
			}
			out[module+".scales"], out[module+".biases"] = t.scales, t.biases
			quant[module] = quantSpec{mode: "affine", bits: t.bits, values: 32}
			continue
		}
		if t.block != nil {
			if suffix != "weight" {
				return nil, nil, fmt.Errorf("%s: tensor %s is stored as %s, which archgen reads for weights only", path, n, t.block.Name)
			}
			quant[module] = quantSpec{mode: t.block.Mode, bits: t.block.Bits, values: t.block.Values}
		}
	}
	return out, quant, nil
}

// quantization is the config's quantization block: the spec most modules
// share as the default, the others as per-module entries.
func quantization(q map[string]quantSpec) map[string]any {
	if len(q) == 0 {
		return nil
	}
	count := map[quantSpec]int{}
	for _, s := range q {
		count[s]++
	}
	var def quantSpec
	best := -1
	for s, n := range count {
		if n > best || n == best && (s.mode < def.mode) {
			def, best = s, n
		}
	}
	out := map[string]any{"group_size": def.values, "bits": def.bits, "mode": def.mode}
	for module, s := range q {
		if s != def {
			out[module] = map[string]any{"group_size": s.values, "bits": s.bits, "mode": s.mode}
		}
	}
	return out
}

// unpermute undoes llama.cpp's reordering of q and k rows. Its converter
// views the rows of each head as [2, d/2] and stores them as [d/2, 2]; the
// inverse views them as [d/2, 2] and swaps back. Packed weights, scales,
// biases and bias vectors are all rows of the same projection.
func unpermute(t map[string]*mlx.Array, cfg map[string]any, a *nn.GGUF, s *mlx.Stream) error {
	heads := cfg["num_attention_heads"].(int)
	kv := cfg["num_key_value_heads"].(int)
	q, k := "."+a.Tensors[ggufQ]+".", "."+a.Tensors[ggufK]+"."
	g := mlx.NewGraph(s)
	defer g.Close()
	var names []string
	var fixed []*mlx.Array
	for _, n := range slices.Sorted(maps.Keys(t)) {
		var h int
		switch {
		case strings.Contains(n, q):
			h = heads
		case strings.Contains(n, k):
			h = kv
		default:
			continue
		}
		a := t[n]
		sh := a.Shape()
		rows := sh[0]
		if rows%(2*h) != 0 {
			return fmt.Errorf("tensor %s: %d rows do not split into %d heads of pairs", n, rows, h)
		}
		view := append([]int{h, rows / h / 2, 2}, sh[1:]...)
		x := g.Reshape(a, view...)
		x = g.Swapaxes(x, 1, 2)
		x = g.Contiguous(g.Reshape(x, sh...))
		names = append(names, n)
		fixed = append(fixed, x)
	}
	if err := g.Eval(fixed...); err != nil {
		return err
	}
	for i, n := range names {
		g.Keep(fixed[i])
		t[n].Free()
		t[n] = fixed[i]
	}
	return nil
}

// metadata reads typed values out of a GGUF file's metadata.
type metadata struct {
	path string
	raw  map[string]Value
}

func (m metadata) has(k string) bool { _, ok := m.raw[k]; return ok }

func (m metadata) get(k string) (Value, error) {
	v, ok := m.raw[k]
	if !ok {
		return v, fmt.Errorf("%s: metadata key %s is missing", m.path, k)
	}
	return v, nil
}

func (m metadata) str(k string) (string, error) {
	v, err := m.get(k)
	if err != nil {
		return "", err
	}
	if v.Kind != ValueString {
		return "", fmt.Errorf("%s: metadata key %s is not a string", m.path, k)
	}
	return v.Str, nil
}

func (m metadata) strs(k string) ([]string, error) {
	v, err := m.get(k)
	if err != nil {
		return nil, err
	}
	if v.Kind != ValueStrings {
		return nil, fmt.Errorf("%s: metadata key %s is not a list of strings", m.path, k)
	}
	return v.Strs, nil
}

func (m metadata) number(k string) (float64, error) {
	v, err := m.get(k)
	if err != nil {
		return 0, err
	}
	if v.Kind != ValueNumber {
		return 0, fmt.Errorf("%s: metadata key %s is not a number", m.path, k)
	}
	return v.Num, nil
}

func (m metadata) int(k string) (int, error) {
	f, err := m.number(k)
	if err != nil {
		return 0, err
	}
	if f != float64(int(f)) {
		return 0, fmt.Errorf("%s: metadata key %s is %v, not an integer", m.path, k, f)
	}
	return int(f), nil
}

// float reads a metadata number; a float32 one as the decimal it was
// written from, so 1e-5 stays 1e-5 rather than its float32 neighbour.
func (m metadata) float(k string) (float64, error) {
	f, err := m.number(k)
	if err != nil || !m.raw[k].F32 {
		return f, err
	}
	v, err := strconv.ParseFloat(strconv.FormatFloat(f, 'g', -1, 32), 64)
	if err != nil {
		return f, nil
	}
	return v, nil
}

func (m metadata) ints(k string) ([]int32, error) {
	v, err := m.get(k)
	if err != nil {
		return nil, err
	}
	if v.Kind != ValueNumbers {
		return nil, fmt.Errorf("%s: metadata key %s is not a list of numbers", m.path, k)
	}
	out := make([]int32, len(v.Nums))
	for i, f := range v.Nums {
		if f != float64(int32(f)) {
			return nil, fmt.Errorf("%s: metadata key %s: entry %d is %v, not a 32-bit integer", m.path, k, i, f)
		}
		out[i] = int32(f)
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
