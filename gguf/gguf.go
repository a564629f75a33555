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
	"math"
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
	// Pooling is how an embedding model's file says its states pool
	// (ARCH.pooling_type: "mean", "cls" or "last"); "" where it says
	// none, or pools otherwise (a reranker's "rank").
	Pooling string
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
		if a.GGUF == nil {
			continue
		}
		for _, n := range append([]string{a.GGUF.Arch}, a.GGUF.Aliases...) {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// find is the architecture whose GGUF name is name: of those sharing it,
// the one whose required key the file holds (non-zero), else the one
// requiring none.
func find(archs []nn.Arch, name string, md metadata) (string, *nn.GGUF, bool) {
	var plain *nn.Arch
	for i, a := range archs {
		if a.GGUF == nil || (a.GGUF.Arch != name && !slices.Contains(a.GGUF.Aliases, name)) {
			continue
		}
		if r := a.GGUF.Requires; r != "" {
			k, want, exact := requirement(r)
			if v, err := md.number(name + "." + k); err == nil && (v == want && exact || v != 0 && !exact) {
				return a.Name, a.GGUF, true
			}
			continue
		}
		plain = &archs[i]
	}
	if plain == nil {
		return "", nil, false
	}
	return plain.Name, plain.GGUF, true
}

// requirement splits a GGUF.Requires: the metadata key, and the number
// it must equal where exact (else any but 0).
func requirement(r string) (key string, want float64, exact bool) {
	k, n, ok := strings.Cut(r, " == ")
	if !ok {
		return r, 0, false
	}
	v, err := strconv.ParseFloat(n, 64)
	return k, v, err == nil
}

// llama.cpp's names of the tensors outside the layers.
const (
	ggufEmbed = "token_embd"
	ggufNorm  = "output_norm"
	ggufHead  = "output"
	ggufQ     = "attn_q"   // rows reordered under PermuteQK, by heads
	ggufK     = "attn_k"   // by key/value heads
	ggufQKV   = "attn_qkv" // rows regrouped by head under QKVByHead
)

// blockIndex is the block number of any tensor of a block.
var blockIndex = regexp.MustCompile(`^blk\.(\d+)\.`)

var blockName = regexp.MustCompile(`^blk\.(\d+)\.([a-z0-9_]+(?:\.[a-z0-9_]+)*?)(?:\.(weight|bias|scales|biases))?$`)
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
	modelType, a, ok := find(archs, name, md)
	if !ok {
		return nil, fmt.Errorf("%s: GGUF architecture %q is not supported (supported: %v)", path, name, Supported(archs))
	}
	cfg, err := config(md, name, modelType, a, arrays)
	if err != nil {
		return nil, err
	}
	if err := longRope(arrays, cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if a.WindowRope != "" {
		var freqs *tensor
		if t, ok := arrays[ropeFreqs]; ok {
			freqs = &t
		}
		rsKey := "rope_scaling"
		if a.RopeScalingKey != "" {
			rsKey = a.RopeScalingKey
		}
		scaling, _ := cfg[rsKey].(map[string]any)
		rp, err := windowRope(md, name, freqs, scaling)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		delete(cfg, rsKey)
		cfg[a.WindowRope] = rp
		if freqs != nil {
			freqs.free()
			delete(arrays, ropeFreqs)
		}
	}
	if t, ok := arrays[ropeFreqs]; ok {
		if err := ropeScaling(md, name, t, cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		t.free()
		delete(arrays, ropeFreqs)
	}
	if a.ExtraLayers != "" {
		dropExtraLayers(arrays, cfg["num_hidden_layers"].(int))
	}
	for _, n := range unread(arrays, cfg, a) {
		arrays[n].free()
		delete(arrays, n)
	}
	tensors, quant, err := rename(path, arrays, a)
	if err != nil {
		return nil, err
	}
	if err := layerValues(md, name, a, cfg["num_hidden_layers"].(int), tensors); err != nil {
		return nil, err
	}
	if a.PermuteQK {
		if err := unpermute(tensors, cfg, a, s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := restoreForms(tensors, cfg["num_hidden_layers"].(int), a, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := splitRows(tensors, quant, cfg, a, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	joined := map[string]partsSpec{}
	if err := joinRows(tensors, quant, joined, cfg, a, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if a.QKVByHead {
		if err := regroupQKV(tensors, cfg, a, s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if a.NormShift != 0 {
		if err := unshift(tensors, a.NormShift, s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if q := quantization(quant, joined); q != nil {
		cfg["quantization"] = q
	}
	tok, tokCfg, err := tokenizerFiles(md, cfg)
	if err != nil {
		return nil, err
	}
	pooling, err := poolingType(md, name)
	if err != nil {
		return nil, err
	}
	return &Model{Path: path, Arch: name, Config: cfg, Tensors: tensors, TokenizerJSON: tok, TokenizerConfig: tokCfg, Pooling: pooling}, nil
}

// poolingType is the pooling ARCH.pooling_type names, by llama.cpp's
// numbers: 1 the mean, 2 the first token, 3 the last; "" for none (0), a
// reranker's (4) or a file without the key.
func poolingType(md metadata, name string) (string, error) {
	k := name + ".pooling_type"
	if !md.has(k) {
		return "", nil
	}
	n, err := md.int(k)
	if err != nil {
		return "", err
	}
	switch n {
	case 1:
		return "mean", nil
	case 2:
		return "cls", nil
	case 3:
		return "last", nil
	case 0, 4:
		return "", nil
	}
	return "", fmt.Errorf("%s: %s %d is not a pooling llama.cpp has (0 none, 1 mean, 2 cls, 3 last, 4 rank)", md.path, k, n)
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
	if a.NoAttention {
		// a state-space model's: no heads and no feed-forward block
		ints = slices.DeleteFunc(ints, func(k struct{ gguf, hf string }) bool {
			return k.hf == "intermediate_size" || k.hf == "num_attention_heads"
		})
	}
	for _, k := range ints {
		if k.hf == "intermediate_size" && md.raw[key(k.gguf)].Kind == ValueNumbers {
			// a width a layer (0 where a layer has none): the narrowest
			// (a double-wide layer's is twice it, DoubleWidth)
			w, err := ffnWidth(md, key(k.gguf), a, cfg)
			if err != nil {
				return nil, err
			}
			if w > 0 {
				cfg[k.hf] = w
				continue
			}
		}
		v, err := md.int(key(k.gguf))
		if err != nil {
			return nil, err
		}
		if v <= 0 {
			return nil, fmt.Errorf("%s: %s is %d", md.path, key(k.gguf), v)
		}
		cfg[k.hf] = v
	}
	if _, ok := cfg[a.DoubleWidth]; a.DoubleWidth != "" && !ok {
		cfg[a.DoubleWidth] = false // one width
	}
	if k := key(a.ExtraLayers); a.ExtraLayers != "" && md.has(k) {
		n, err := md.int(k)
		if err != nil {
			return nil, err
		}
		if layers := cfg["num_hidden_layers"].(int); n < 0 || n >= layers {
			return nil, fmt.Errorf("%s: %s is %d, of %d blocks", md.path, k, n, layers)
		}
		cfg["num_hidden_layers"] = cfg["num_hidden_layers"].(int) - n
	}
	if !a.NoAttention {
		heads := cfg["num_attention_heads"].(int)
		kv := heads
		if k := key("attention.head_count_kv"); md.raw[k].Kind == ValueNumbers && a.KVWindow != "" {
			var err error
			if kv, err = kvWindow(md, k, key("attention.sliding_window_pattern"), cfg["num_hidden_layers"].(int), a, cfg); err != nil {
				return nil, err
			}
		} else if md.raw[k].Kind == ValueNumbers && a.KVLayersKey != "" {
			var err error
			if kv, err = kvLayers(md, k, cfg["num_hidden_layers"].(int), a, cfg, arrays); err != nil {
				return nil, err
			}
		} else if md.has(k) {
			var err error
			if kv, err = md.int(k); err != nil {
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
		if k := key("rope.dimension_count"); a.RopeFraction != "" && md.has(k) {
			dims, err := md.int(k)
			if err != nil {
				return nil, err
			}
			if dims <= 0 || dims > headDim || dims%2 != 0 {
				return nil, fmt.Errorf("%s: %s is %d, for heads of %d", md.path, k, dims, headDim)
			}
			cfg[a.RopeFraction] = float64(dims) / float64(headDim)
		}
	}
	// an RMSNorm's epsilon; a LayerNorm's (attention.layer_norm_epsilon)
	// goes by the descriptor's keys, under its own config name
	if k := key("attention.layer_norm_rms_epsilon"); md.has(k) {
		eps, err := md.float(k)
		if err != nil {
			return nil, err
		}
		cfg["rms_norm_eps"] = eps
	}
	theta := 10000.0
	if md.has(key("rope.freq_base")) {
		var err error
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
			// YaRN's settings where the file has them: the correction
			// range, and the log multiplier as mscale_all_dim (with mscale
			// 1, as llama.cpp reads it)
			for _, k := range []struct{ gguf, hf string }{
				{"rope.scaling.yarn_beta_fast", "beta_fast"},
				{"rope.scaling.yarn_beta_slow", "beta_slow"},
				{"rope.scaling.yarn_log_multiplier", "mscale_all_dim"},
			} {
				if t == "yarn" && md.has(key(k.gguf)) {
					v, err := md.float(key(k.gguf))
					if err != nil {
						return nil, err
					}
					rs[k.hf] = v
				}
			}
			if m, ok := rs["mscale_all_dim"]; ok {
				rs["mscale"] = 1.0
				if a.YarnLogTenth {
					// a tenth of it in the file, and mscale its equal
					rs["mscale_all_dim"] = 10 * m.(float64)
					rs["mscale"] = rs["mscale_all_dim"]
				}
			}
			rsKey := "rope_scaling"
			if a.RopeScalingKey != "" {
				rsKey = a.RopeScalingKey
			}
			cfg[rsKey] = rs
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
	for k, v := range a.AliasConfig[name] {
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
		if md.raw[key(k)].Bool {
			cfg[a.Keys[k]] = v != 0 // a flag (expert_weights_norm: norm_topk_prob)
			continue
		}
		cfg[a.Keys[k]] = v
	}
	for _, k := range slices.Sorted(maps.Keys(a.Computed)) {
		v, ok, err := computed(md, name, a.Computed[k])
		if err != nil {
			return nil, err
		}
		if ok {
			cfg[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.Copy)) {
		if v, ok := cfg[a.Copy[k]]; ok {
			cfg[k] = v
		}
	}
	if k := key("attention.sliding_window_pattern"); a.SlidingKey != "" && md.has(k) {
		v, err := slidingLayers(md, k, cfg["num_hidden_layers"].(int), a.SlidingForm)
		if err != nil {
			return nil, err
		}
		cfg[a.SlidingKey] = v
	}
	for k, t := range a.Flags {
		// on any layer: the layers of a hybrid differ
		cfg[k] = slices.ContainsFunc(slices.Collect(maps.Keys(arrays)), func(n string) bool {
			m := blockIndex.FindString(n)
			return m != "" && n[len(m):] == t
		})
	}
	for _, k := range slices.Sorted(maps.Keys(a.Enums)) {
		if !md.has(key(k)) {
			continue
		}
		n, err := md.int(key(k))
		if err != nil {
			return nil, err
		}
		e := a.Enums[k]
		w, ok := e.Words[n]
		if !ok {
			known := slices.Sorted(maps.Keys(e.Words))
			return nil, fmt.Errorf("%s: %s is %d, which archgen does not read (it reads %v)", md.path, key(k), n, known)
		}
		cfg[e.Key] = w
	}
	if a.SparseLayers != "" {
		lead := 0
		if k := key("leading_dense_block_count"); md.has(k) {
			var err error
			if lead, err = md.int(k); err != nil {
				return nil, err
			}
		}
		sparse := make([]bool, cfg["num_hidden_layers"].(int))
		for i := range sparse {
			sparse[i] = i >= lead
		}
		cfg[a.SparseLayers] = sparse
	}
	for k, pair := range a.Lacking {
		cfg[k] = false
		for i := range cfg["num_hidden_layers"].(int) {
			_, has := arrays[fmt.Sprintf("blk.%d.%s", i, pair[0])]
			_, other := arrays[fmt.Sprintf("blk.%d.%s", i, pair[1])]
			if has && !other {
				cfg[k] = true
			}
		}
	}
	if a.WidthKey != "" && slices.Contains(a.WidthLayers, cfg["num_hidden_layers"].(int)) && !a.NoAttention {
		cfg[a.WidthKey] = cfg["hidden_size"].(int) / cfg["num_attention_heads"].(int)
	}
	return cfg, nil
}

// computed is the value of expr ("a - b": two metadata keys within the
// architecture's namespace and +, -, * or /, the second possibly
// "sqrt(b)", its square root) on the file's metadata, a whole number where
// both operands are (a quotient must be exact); ok is false where the file
// lacks either key.
func computed(md metadata, name, expr string) (v any, ok bool, err error) {
	f := strings.Fields(expr)
	if len(f) != 3 {
		return nil, false, fmt.Errorf("%s: %q is not two keys and an operation", md.path, expr)
	}
	second, root := strings.CutPrefix(f[2], "sqrt(")
	if root {
		second = strings.TrimSuffix(second, ")")
	}
	a, b := name+"."+f[0], name+"."+second
	if !md.has(a) || !md.has(b) {
		return nil, false, nil
	}
	x, err := md.float(a)
	if err != nil {
		return nil, false, err
	}
	y, err := md.float(b)
	if err != nil {
		return nil, false, err
	}
	if root {
		if y < 0 {
			return nil, false, fmt.Errorf("%s: %s (%g) is negative: %q takes its square root", md.path, b, y, expr)
		}
		y = math.Sqrt(y)
	}
	var r float64
	switch f[1] {
	case "+":
		r = x + y
	case "-":
		r = x - y
	case "*":
		r = x * y
	case "/":
		if y == 0 || math.Mod(x, y) != 0 {
			return nil, false, fmt.Errorf("%s: %s (%g) is not a whole multiple of %s (%g)", md.path, a, x, b, y)
		}
		r = x / y
	default:
		return nil, false, fmt.Errorf("%s: %q: %s is not +, -, * or /", md.path, expr, f[1])
	}
	if r == math.Trunc(r) && x == math.Trunc(x) && y == math.Trunc(y) {
		return int(r), true, nil
	}
	return r, true, nil
}

// wholeNumber is a config value as an int: the reader's ints, and the
// float64s Keys writes where they are whole; 0 otherwise.
func wholeNumber(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case float64:
		if x == math.Trunc(x) {
			return int(x)
		}
	}
	return 0
}

// unread lists the tensors of arrays (llama.cpp's names) that the last
// layers hold and the model does not run (UnreadCount, UnreadTensors).
func unread(arrays map[string]tensor, cfg map[string]any, a *nn.GGUF) []string {
	n := wholeNumber(cfg[a.UnreadCount])
	if a.UnreadCount == "" || n <= 0 {
		return nil
	}
	layers := cfg["num_hidden_layers"].(int)
	var out []string
	for name := range arrays {
		m := blockName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		if i >= layers-n && i < layers && slices.Contains(a.UnreadTensors, m[2]) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ffnWidth is the narrowest non-zero feed-forward width of the widths a
// layer at k; with DoubleWidth, the others must be twice it, and the
// config key says whether any is.
func ffnWidth(md metadata, k string, a *nn.GGUF, cfg map[string]any) (int, error) {
	ws, err := md.ints(k)
	if err != nil {
		return 0, err
	}
	narrow := 0
	for _, w := range ws {
		if w > 0 && (narrow == 0 || int(w) < narrow) {
			narrow = int(w)
		}
	}
	if a.DoubleWidth == "" {
		return narrow, nil
	}
	double := false
	for i, w := range ws {
		switch int(w) {
		case narrow:
		case 2 * narrow:
			double = true
		default:
			return 0, fmt.Errorf("%s: %s: layer %d is %d wide, where the narrowest is %d (archgen reads widths of it and twice it)", md.path, k, i, w, narrow)
		}
	}
	cfg[a.DoubleWidth] = double
	return narrow, nil
}

// kvWindow reads the key/value head count a layer at k where the
// sliding and full-attention layers (the pattern at swa, a bool a layer)
// have counts of their own: the sliding layers' is returned, the full
// layers' set as a.KVWindow.
func kvWindow(md metadata, k, swa string, layers int, a *nn.GGUF, cfg map[string]any) (int, error) {
	counts, err := md.ints(k)
	if err != nil {
		return 0, err
	}
	pattern := md.raw[swa]
	if len(counts) != layers || pattern.Kind != ValueNumbers || len(pattern.Nums) != layers {
		return 0, fmt.Errorf("%s: %s holds %d counts and %s %d entries, for %d layers", md.path, k, len(counts), swa, len(pattern.Nums), layers)
	}
	got := [2]int{} // sliding, full
	for i, n := range counts {
		kind := 1
		if pattern.Nums[i] != 0 {
			kind = 0
		}
		switch {
		case n <= 0:
			return 0, fmt.Errorf("%s: %s: layer %d has %d key/value heads", md.path, k, i, n)
		case got[kind] != 0 && int(n) != got[kind]:
			return 0, fmt.Errorf("%s: %s: layer %d has %d key/value heads, where the others of its kind (%s) have %d", md.path, k, i, n, [2]string{"sliding", "full attention"}[kind], got[kind])
		}
		got[kind] = int(n)
	}
	if got[1] != 0 {
		cfg[a.KVWindow] = got[1]
	}
	if got[0] == 0 {
		return got[1], nil
	}
	return got[0], nil
}

// windowRope is the file's two ropes as a rope_parameters map: the
// full-attention layers' (proportional where the file has rope_freqs: the
// pairs whose factor is 1 turn at rope.freq_base, those at 1e30 or more
// do not; else the file's rope scaling, where it has one, or a plain rope)
// and the sliding layers' (a plain rope at rope.freq_base_swa, unscaled).
func windowRope(md metadata, name string, freqs *tensor, scaling map[string]any) (map[string]any, error) {
	base := 10000.0
	var err error
	if k := name + ".rope.freq_base"; md.has(k) {
		if base, err = md.float(k); err != nil {
			return nil, err
		}
	}
	swaBase := base
	if k := name + ".rope.freq_base_swa"; md.has(k) {
		if swaBase, err = md.float(k); err != nil {
			return nil, err
		}
	}
	sliding := map[string]any{"rope_type": "default", "rope_theta": swaBase}
	if freqs == nil {
		full := map[string]any{"rope_type": "default", "rope_theta": base}
		for k, v := range scaling {
			if k == "type" {
				k = "rope_type"
			}
			full[k] = v
		}
		return map[string]any{"full_attention": full, "sliding_attention": sliding}, nil
	}
	fraction := 1.0
	{
		t := *freqs
		if t.block != nil || t.scales != nil || t.array.Dtype() != mlx.Float32 || len(t.array.Shape()) != 1 {
			return nil, fmt.Errorf("tensor %s: %s %v, want a float32 vector", ropeFreqs, t.array.Dtype(), t.array.Shape())
		}
		f, err := t.array.Float32s()
		if err != nil {
			return nil, err
		}
		turning := 0
		for i, v := range f {
			switch {
			case v == 1 && turning == i:
				turning++
			case v >= 1e29:
			default:
				return nil, fmt.Errorf("tensor %s: entry %d is %g: archgen reads factors of 1 (the pairs that turn, first) and 1e30 (those that do not)", ropeFreqs, i, v)
			}
		}
		fraction = float64(turning) / float64(len(f))
	}
	return map[string]any{
		"full_attention":    map[string]any{"rope_type": "proportional", "partial_rotary_factor": fraction, "rope_theta": base},
		"sliding_attention": sliding,
	}, nil
}

// kvLayers reads the key/value head count a layer at k (0 where the layer
// has no attention), which must be one count on every layer with
// attention: the config key a.KVLayersKey is set to a word a layer (with
// KVLayersFFN, the layers without heads and with a feed-forward width
// have words of their own), and the count is returned.
func kvLayers(md metadata, k string, layers int, a *nn.GGUF, cfg map[string]any, arrays map[string]tensor) (int, error) {
	counts, err := md.ints(k)
	if err != nil {
		return 0, err
	}
	if len(counts) != layers {
		return 0, fmt.Errorf("%s: %s holds %d counts, for %d layers", md.path, k, len(counts), layers)
	}
	// the feed-forward width a layer, where the layers without heads are
	// told apart by it
	var widths []int32
	ffKey := strings.TrimSuffix(k, "attention.head_count_kv") + "feed_forward_length"
	if a.KVLayersFFN != "" && md.raw[ffKey].Kind == ValueNumbers {
		if widths, err = md.ints(ffKey); err != nil {
			return 0, err
		}
		if len(widths) != layers {
			return 0, fmt.Errorf("%s: %s holds %d widths, for %d layers", md.path, ffKey, len(widths), layers)
		}
	}
	kv := 0
	words := make([]string, layers)
	for i, n := range counts {
		switch {
		case n < 0 || n > 0 && kv > 0 && int(n) != kv:
			return 0, fmt.Errorf("%s: %s: layer %d has %d key/value heads, where the others with attention have %d", md.path, k, i, n, kv)
		case n == 0 && widths != nil && widths[i] > 0:
			words[i] = a.KVLayersFFN
			if _, router := arrays[fmt.Sprintf("blk.%d.ffn_gate_inp.weight", i)]; router && a.KVLayersExperts != "" {
				words[i] = a.KVLayersExperts
			}
		case n == 0:
			words[i] = a.KVLayersWords[1]
		default:
			kv, words[i] = int(n), a.KVLayersWords[0]
		}
	}
	if kv == 0 {
		return 0, fmt.Errorf("%s: %s: no layer has attention", md.path, k)
	}
	if a.KVLayersLetters {
		cfg[a.KVLayersKey] = strings.Join(words, "")
	} else {
		cfg[a.KVLayersKey] = words
	}
	return kv, nil
}

// slidingLayers spells the sliding-window pattern at k (a number a layer,
// non-zero where it slides, or one number n: every n-th layer full) in
// form letters (L and G a layer) or types (sliding_attention and
// full_attention).
func slidingLayers(md metadata, k string, layers int, form string) (any, error) {
	v, err := md.get(k)
	if err != nil {
		return nil, err
	}
	slides := make([]bool, layers)
	switch {
	case v.Kind == ValueNumber && v.Num >= 1 && v.Num == float64(int(v.Num)):
		for i := range slides {
			slides[i] = (i+1)%int(v.Num) != 0
		}
	case v.Kind == ValueNumbers && len(v.Nums) == layers:
		for i, n := range v.Nums {
			slides[i] = n != 0
		}
	default:
		return nil, fmt.Errorf("%s: metadata key %s is neither a layer count nor a flag for each of %d layers", md.path, k, layers)
	}
	if form == "letters" {
		b := make([]byte, layers)
		for i, s := range slides {
			b[i] = "GL"[btoi(s)]
		}
		return string(b), nil
	}
	types := make([]any, layers)
	for i, s := range slides {
		types[i] = []string{"full_attention", "sliding_attention"}[btoi(s)]
	}
	return types, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// layerValues makes the tensors a.LayerValues names, of each layer, from
// the metadata arrays holding a number a layer (whole keys, outside the
// architecture's namespace).
func layerValues(md metadata, name string, a *nn.GGUF, layers int, t map[string]*mlx.Array) error {
	for _, k := range slices.Sorted(maps.Keys(a.LayerValues)) {
		v, err := md.get(k)
		if err != nil {
			return err
		}
		if v.Kind != ValueNumbers || len(v.Nums) != layers {
			return fmt.Errorf("%s: metadata key %s is not a number for each of %d layers", md.path, k, layers)
		}
		for i, x := range v.Nums {
			arr, err := mlx.NewArray([]float32{float32(x)}, 1)
			if err != nil {
				return err
			}
			t[fmt.Sprintf("%s.%d.%s", a.Layers, i, a.LayerValues[k])] = arr
		}
	}
	return nil
}

// dropExtraLayers frees the tensors of blocks past the model's layers (the
// multi-token prediction blocks ExtraLayers counts), which the checkpoint
// does not hold.
func dropExtraLayers(arrays map[string]tensor, layers int) {
	for n, t := range arrays {
		m := blockIndex.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		if i, err := strconv.Atoi(m[1]); err == nil && i >= layers {
			t.free()
			delete(arrays, n)
		}
	}
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
	norm := ggufNorm
	if a.FinalNorm != "" {
		norm = a.FinalNorm
	}
	topNames := map[string]string{ggufEmbed: a.Embed, norm: a.Norm, ggufHead: a.Head}
	maps.Copy(topNames, a.Top)
	for _, n := range slices.Sorted(maps.Keys(arrays)) {
		var module, suffix string
		if m := blockName.FindStringSubmatch(n); m != nil {
			whole := m[2]
			if m[3] != "" {
				whole += "." + m[3]
			}
			if hf, ok := a.Tensors[whole]; ok || m[3] == "" {
				// a tensor without a suffix in the file (an SSM's
				// ssm_a) is mapped whole too
				if !ok {
					return nil, nil, fmt.Errorf("%s: unexpected tensor %s", path, n)
				}
				// a tensor mapped whole: the checkpoint's name has no suffix
				// (gpt-oss's self_attn.sinks)
				if t := arrays[n]; t.scales != nil || t.block != nil {
					return nil, nil, fmt.Errorf("%s: tensor %s is quantized, which archgen reads for weights only", path, n)
				}
				out[a.Layers+"."+m[1]+"."+hf] = arrays[n].array
				continue
			}
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
func quantization(q map[string]quantSpec, joined map[string]partsSpec) map[string]any {
	if len(q) == 0 && len(joined) == 0 {
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
	if len(q) == 0 {
		// parts in unlike float dtypes alone: a default no module holds
		// scales for
		out = map[string]any{"group_size": 64, "bits": 4, "mode": "affine"}
	}
	for module, s := range q {
		if s != def {
			out[module] = map[string]any{"group_size": s.values, "bits": s.bits, "mode": s.mode}
		}
	}
	for module, p := range joined {
		out[module] = map[string]any{"parts": p.parts, "part_groups": p.groups}
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
	return replaceEvaluated(g, t, names, fixed)
}

// restoreForms undoes the forms the file holds some tensors in
// (StoredAs, then TrailingAxis and Flatten): each layer's tensor of such a
// name, mapped whole or as a module's weight.
func restoreForms(t map[string]*mlx.Array, layers int, a *nn.GGUF, s *mlx.Stream) error {
	if len(a.StoredAs) == 0 && len(a.TrailingAxis) == 0 && len(a.Flatten) == 0 {
		return nil
	}
	g := mlx.NewGraph(s)
	defer g.Close()
	done := map[string]*mlx.Array{} // each tensor's form so far
	each := func(gg string, f func(n string, x *mlx.Array) (*mlx.Array, error)) error {
		hf := a.Tensors[gg]
		for i := range layers {
			base := fmt.Sprintf("%s.%d.%s", a.Layers, i, hf)
			for _, n := range []string{base, base + ".weight"} {
				x, ok := t[n]
				if !ok {
					continue
				}
				if _, q := t[strings.TrimSuffix(n, ".weight")+".scales"]; q || !x.Dtype().IsFloat() {
					return fmt.Errorf("tensor %s (llama.cpp's %s) is quantized, which archgen reads for matrices only", n, gg)
				}
				if y, ok := done[n]; ok {
					x = y
				}
				y, err := f(n, x)
				if err != nil {
					return err
				}
				done[n] = y
			}
		}
		return nil
	}
	for _, gg := range slices.Sorted(maps.Keys(a.StoredAs)) {
		err := each(gg, func(n string, x *mlx.Array) (*mlx.Array, error) {
			// x = -exp(v): v = log(-x), in float32
			return g.AsType(g.Log(g.Negative(g.AsType(x, mlx.Float32))), x.Dtype()), nil
		})
		if err != nil {
			return err
		}
	}
	for _, gg := range a.TrailingAxis {
		err := each(gg, func(n string, x *mlx.Array) (*mlx.Array, error) {
			return g.Reshape(x, append(x.Shape(), 1)...), nil
		})
		if err != nil {
			return err
		}
	}
	for _, gg := range a.Flatten {
		err := each(gg, func(n string, x *mlx.Array) (*mlx.Array, error) {
			return g.Reshape(x, x.Size()), nil
		})
		if err != nil {
			return err
		}
	}
	names := slices.Sorted(maps.Keys(done))
	fixed := make([]*mlx.Array, len(names))
	for i, n := range names {
		fixed[i] = done[n]
	}
	return replaceEvaluated(g, t, names, fixed)
}

// joinRows puts back the projections llama.cpp's converter split (Join):
// in each layer holding every part, the parts' weights (and scales and
// biases, quantized) are stacked row after row as the joined module's,
// or, in groups (JoinGroups), each part's share of a group after another
// part's, group after group. Parts stored unalike (llama.cpp's _M
// mixtures keep attn_v in a wider type than attn_q) stay as they are
// stored, as the joined module's parts (<module>.parts.<j>), and joined
// records each such module's part count and groups for the quantization
// block; a float bias is joined either way.
func joinRows(t map[string]*mlx.Array, quant map[string]quantSpec, joined map[string]partsSpec, cfg map[string]any, a *nn.GGUF, s *mlx.Stream) error {
	if len(a.Join) == 0 {
		return nil
	}
	layers := cfg["num_hidden_layers"].(int)
	g := mlx.NewGraph(s)
	defer g.Close()
	var names []string
	var fixed []*mlx.Array
	var drop []string
	renames := map[string]string{}
	for _, to := range slices.Sorted(maps.Keys(a.Join)) {
		parts := a.Join[to]
		for i := range layers {
			at := func(m string) string { return fmt.Sprintf("%s.%d.%s", a.Layers, i, m) }
			if _, ok := t[at(parts[0])+".weight"]; !ok {
				continue
			}
			spec, specOK := quant[at(parts[0])]
			alike := true
			for _, p := range parts[1:] {
				s2, ok2 := quant[at(p)]
				w, w0 := t[at(p)+".weight"], t[at(parts[0])+".weight"]
				if ok2 != specOK || s2 != spec || w == nil || w.Dtype() != w0.Dtype() || w.Ndim() != w0.Ndim() || w.Dim(-1) != w0.Dim(-1) {
					alike = false
				}
			}
			for _, suffix := range []string{".weight", ".scales", ".biases", ".bias"} {
				if !alike && suffix != ".bias" {
					// each part as stored, renamed as the joined module's
					for j, p := range parts {
						if _, ok := t[at(p)+suffix]; ok {
							renames[at(p)+suffix] = fmt.Sprintf("%s.parts.%d%s", at(to), j, suffix)
						}
					}
					continue
				}
				var xs []*mlx.Array
				for _, p := range parts {
					x, ok := t[at(p)+suffix]
					if !ok {
						continue
					}
					xs = append(xs, x)
				}
				if len(xs) == 0 {
					continue
				}
				if len(xs) != len(parts) {
					return fmt.Errorf("layer %d: %s is joined from %s, of which only some have %s", i, at(to), strings.Join(parts, ", "), strings.TrimPrefix(suffix, "."))
				}
				groups := 1
				if k := a.JoinGroups[to]; k != "" {
					groups = wholeNumber(cfg[k])
				}
				y, err := joinGroups(g, xs, groups, suffix == ".bias")
				if err != nil {
					return fmt.Errorf("layer %d: %s (%s): %w (%s)", i, at(to)+suffix, strings.Join(parts, ", "), err, a.JoinGroups[to])
				}
				names = append(names, at(to)+suffix)
				fixed = append(fixed, y)
				for _, p := range parts {
					drop = append(drop, at(p)+suffix)
				}
			}
			if !alike {
				groups := 1
				if k := a.JoinGroups[to]; k != "" {
					groups = wholeNumber(cfg[k])
				}
				for j, p := range parts {
					if x := t[at(p)+".weight"]; groups <= 0 || x.Dim(x.Ndim()-2)%groups != 0 {
						return fmt.Errorf("layer %d: %s (%s): part %d's %d rows do not split into %d groups (%s)", i, at(to), strings.Join(parts, ", "), j+1, x.Dim(x.Ndim()-2), groups, a.JoinGroups[to])
					}
					if s2, ok := quant[at(p)]; ok {
						quant[fmt.Sprintf("%s.parts.%d", at(to), j)] = s2
					}
					delete(quant, at(p))
				}
				joined[at(to)] = partsSpec{parts: len(parts), groups: groups}
				continue
			}
			if specOK {
				quant[at(to)] = spec
				for _, p := range parts {
					delete(quant, at(p))
				}
			}
		}
	}
	for from, to := range renames {
		t[to] = t[from]
		delete(t, from)
	}
	return replaceEvaluated(g, t, names, fixed, drop...)
}

// partsSpec is a joined module kept as its parts: how many, and the
// groups their rows come in.
type partsSpec struct{ parts, groups int }

// joinGroups stacks the parts' rows (the last axis of a bias, the one
// before it otherwise): one part after another, or, in groups, each
// part's share of the first group, then of the second, and so on.
func joinGroups(g *mlx.Graph, xs []*mlx.Array, groups int, bias bool) (*mlx.Array, error) {
	axis := xs[0].Ndim() - 2
	if bias {
		axis = xs[0].Ndim() - 1
	}
	if axis < 0 {
		return nil, fmt.Errorf("%v has no rows", xs[0].Shape())
	}
	if groups == 1 {
		return g.Concatenate(axis, xs...), nil
	}
	rows := 0
	grouped := make([]*mlx.Array, len(xs))
	for j, x := range xs {
		sh := x.Shape()
		if groups <= 0 || sh[axis]%groups != 0 {
			return nil, fmt.Errorf("part %d's %d rows do not split into %d groups", j+1, sh[axis], groups)
		}
		rows += sh[axis]
		grouped[j] = g.Reshape(x, append(append(append([]int{}, sh[:axis]...), groups, sh[axis]/groups), sh[axis+1:]...)...)
	}
	out := xs[0].Shape()
	out[axis] = rows
	return g.Contiguous(g.Reshape(g.Concatenate(axis+1, grouped...), out...)), nil
}

// splitRows takes apart the projections llama.cpp's converter fused
// (Split): in each layer holding the module, its weight's rows (and its
// scales' and biases', quantized; of each expert, stacked) split into
// equal parts, one a module, in order, or, in groups (SplitGroups), each
// part taking its share of every group.
func splitRows(t map[string]*mlx.Array, quant map[string]quantSpec, cfg map[string]any, a *nn.GGUF, s *mlx.Stream) error {
	layers := cfg["num_hidden_layers"].(int)
	if len(a.Split) == 0 {
		return nil
	}
	g := mlx.NewGraph(s)
	defer g.Close()
	var names, drop []string
	var fixed []*mlx.Array
	for _, from := range slices.Sorted(maps.Keys(a.Split)) {
		parts := a.Split[from]
		for i := range layers {
			at := func(m string) string { return fmt.Sprintf("%s.%d.%s", a.Layers, i, m) }
			spec, quantized := quant[at(from)]
			for _, suffix := range []string{".weight", ".scales", ".biases", ".bias"} {
				x, ok := t[at(from)+suffix]
				if !ok {
					continue
				}
				axis := x.Ndim() - 2 // rows
				if suffix == ".bias" {
					axis = x.Ndim() - 1
				}
				if axis < 0 || x.Dim(axis)%len(parts) != 0 {
					return fmt.Errorf("tensor %s %v does not split into %d equal parts of rows (%s)", at(from)+suffix, x.Shape(), len(parts), strings.Join(parts, ", "))
				}
				// in groups: each group holds every part's rows in turn
				groups := 1
				if k := a.SplitGroups[from]; k != "" {
					groups = wholeNumber(cfg[k])
					if groups <= 0 || x.Dim(axis)%(groups*len(parts)) != 0 {
						return fmt.Errorf("tensor %s %v does not split into %d groups (%s) of %d equal parts of rows (%s)", at(from)+suffix, x.Shape(), groups, k, len(parts), strings.Join(parts, ", "))
					}
				}
				shape := x.Shape()
				grouped := append(append(append([]int{}, shape[:axis]...), groups, shape[axis]/groups), shape[axis+1:]...)
				y := g.Reshape(x, grouped...)
				n := shape[axis] / groups / len(parts)
				for j, p := range parts {
					start, stop := make([]int, y.Ndim()), y.Shape()
					start[axis+1], stop[axis+1] = j*n, (j+1)*n
					out := append(append(append([]int{}, shape[:axis]...), groups*n), shape[axis+1:]...)
					names = append(names, at(p)+suffix)
					fixed = append(fixed, g.Contiguous(g.Reshape(g.Slice(y, start, stop), out...)))
				}
				drop = append(drop, at(from)+suffix)
			}
			if quantized {
				for _, p := range parts {
					quant[at(p)] = spec
				}
				delete(quant, at(from))
			}
		}
	}
	return replaceEvaluated(g, t, names, fixed, drop...)
}

// storedAs describes a weight's form: its quantization, or its dtype.
func storedAs(w *mlx.Array, q quantSpec, quantized bool) string {
	if !quantized {
		return w.Dtype().String()
	}
	if q.mode == "affine" {
		return fmt.Sprintf("%d-bit affine groups of %d", q.bits, q.values)
	}
	return q.mode
}

// regroupQKV undoes llama.cpp's regrouping of a fused qkv projection whose
// checkpoint holds each head's q, k and v rows together ([heads, 3,
// head_dim], GPT-NeoX's): its converter stores all q rows, then all k, then
// all v ([3, heads, head_dim]). Every head has its own keys and values.
func regroupQKV(t map[string]*mlx.Array, cfg map[string]any, a *nn.GGUF, s *mlx.Stream) error {
	heads := cfg["num_attention_heads"].(int)
	if kv := cfg["num_key_value_heads"].(int); kv != heads {
		return fmt.Errorf("%d key/value heads for %d query heads: a fused qkv grouped by head needs one of each a head", kv, heads)
	}
	qkv := "." + a.Tensors[ggufQKV] + "."
	g := mlx.NewGraph(s)
	defer g.Close()
	var names []string
	var fixed []*mlx.Array
	for _, n := range slices.Sorted(maps.Keys(t)) {
		if !strings.Contains(n, qkv) {
			continue
		}
		x := t[n]
		sh := x.Shape()
		if sh[0]%(3*heads) != 0 {
			return fmt.Errorf("tensor %s (llama.cpp's %s): %d rows do not split into q, k and v of %d heads", n, ggufQKV, sh[0], heads)
		}
		view := append([]int{3, heads, sh[0] / 3 / heads}, sh[1:]...)
		y := g.Swapaxes(g.Reshape(x, view...), 0, 1)
		names = append(names, n)
		fixed = append(fixed, g.Contiguous(g.Reshape(y, sh...)))
	}
	return replaceEvaluated(g, t, names, fixed)
}

// ropeScaling sets the config's rope_scaling from the factors of
// rope_freqs.weight (Llama 3.1's scaling, see llama3Scaling).
func ropeScaling(md metadata, name string, t tensor, cfg map[string]any) error {
	if t.block != nil || t.scales != nil || t.array.Dtype() != mlx.Float32 || len(t.array.Shape()) != 1 {
		return fmt.Errorf("tensor %s: %s %v, want a float32 vector", ropeFreqs, t.array.Dtype(), t.array.Shape())
	}
	f, err := t.array.Float32s()
	if err != nil {
		return err
	}
	dims := cfg["hidden_size"].(int) / cfg["num_attention_heads"].(int)
	if hd, ok := cfg["head_dim"].(int); ok {
		dims = hd
	}
	if md.has(name + ".rope.dimension_count") {
		if dims, err = md.int(name + ".rope.dimension_count"); err != nil {
			return err
		}
	}
	orig := 8192.0
	if k := name + ".rope.scaling.original_context_length"; md.has(k) {
		if orig, err = md.float(k); err != nil {
			return err
		}
	}
	rs, err := llama3Scaling(f, cfg["rope_theta"].(float64), dims, orig)
	if err != nil {
		return err
	}
	if rs != nil {
		cfg["rope_scaling"] = rs
	}
	return nil
}

// replaceEvaluated evaluates fixed and puts each in t under its name, in
// place of the tensor of that name where there is one (freed); the
// tensors named in drop (parts joined or split into others) are freed and
// taken out.
func replaceEvaluated(g *mlx.Graph, t map[string]*mlx.Array, names []string, fixed []*mlx.Array, drop ...string) error {
	if err := g.Eval(fixed...); err != nil {
		return err
	}
	for i, n := range names {
		g.Keep(fixed[i])
		if old, ok := t[n]; ok {
			old.Free()
		}
		t[n] = fixed[i]
	}
	for _, n := range drop {
		t[n].Free()
		delete(t, n)
	}
	return nil
}

// unshift takes shift off every norm weight (the tensors whose checkpoint
// names end in norm.weight), which llama.cpp's converter added it to. In
// float32 the difference is exact wherever the stored value lies within a
// factor of two of the shift (Sterbenz), so that shift plus it, as the
// checkpoint's norm computes, gives back the stored value.
func unshift(t map[string]*mlx.Array, shift float64, s *mlx.Stream) error {
	g := mlx.NewGraph(s)
	defer g.Close()
	var names []string
	var fixed []*mlx.Array
	for _, n := range slices.Sorted(maps.Keys(t)) {
		if !strings.HasSuffix(n, "norm.weight") {
			continue
		}
		a := t[n]
		if !a.Dtype().IsFloat() {
			return fmt.Errorf("tensor %s: %s, want a float dtype (a norm weight)", n, a.Dtype())
		}
		names = append(names, n)
		fixed = append(fixed, g.Subtract(a, g.Scalar(shift, a.Dtype())))
	}
	return replaceEvaluated(g, t, names, fixed)
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

// flag is the bool (or number, non-zero true) at k; def where the file
// has no such key.
func (m metadata) flag(k string, def bool) (bool, error) {
	if !m.has(k) {
		return def, nil
	}
	n, err := m.number(k)
	return n != 0, err
}

// tokenID is the token id at k, which must lie within a vocabulary of n
// tokens; def where the file has no such key (-1: none, returned as -1).
func (m metadata) tokenID(k string, n, def int) (int, error) {
	if !m.has(k) {
		if def >= n {
			return 0, fmt.Errorf("%s: no %s, and the default %d is outside the %d-token vocabulary", m.path, k, def, n)
		}
		return def, nil
	}
	id, err := m.int(k)
	if err != nil {
		return 0, err
	}
	if id < 0 || id >= n {
		return 0, fmt.Errorf("%s: %s %d is outside the %d-token vocabulary", m.path, k, id, n)
	}
	return id, nil
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
