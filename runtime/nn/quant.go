package nn

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/archgen/archgen/runtime/mlx"
)

// QuantParams are how one matrix is quantized: groups of GroupSize
// consecutive entries of a row share a scale and a bias (mode affine).
type QuantParams struct {
	GroupSize, Bits int
	Mode            string
}

// Quantization is config.json's "quantization" block as mlx-lm writes it:
// the default parameters, and per-module entries keyed by module path
// (model.layers.0.self_attn.q_proj): false keeps that module in full
// precision, true quantizes it with the defaults, an object gives its own
// group_size, bits and mode.
type Quantization struct {
	Default QuantParams
	Modules map[string]ModuleQuant
	// Packed: the quantized modules are stored as compressed-tensors'
	// pack-quantized layout (weight_packed, weight_scale, weight_shape:
	// symmetric 4-bit in groups of 32), which loading reads as affine.
	Packed bool
}

// ModuleQuant is a per-module entry of a quantization block.
type ModuleQuant struct {
	Off    bool         // false in the config: full precision
	Params *QuantParams // nil: the defaults
	// Parts, where set ({"parts": N, "part_groups": G}), says the module's
	// weight is held as N modules <module>.parts.<j>, each quantized (or
	// not) as its own entry says, whose outputs joined are the module's:
	// one after another, or in PartGroups groups, each holding every
	// part's share in turn (a projection a GGUF file split into parts of
	// different block types).
	Parts, PartGroups int
}

// Supported group sizes and bit widths of MLX's affine kernels.
var (
	quantGroupSizes = []int{32, 64, 128}
	quantBits       = []int{2, 3, 4, 5, 6, 8}
)

// ParseQuantization reads the quantization block of a config.json; nil
// when there is none. Checkpoints quantized by other tools (a
// quantization_config without mlx's block) are refused.
func ParseQuantization(config []byte) (*Quantization, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(config, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	raw, ok := top["quantization"]
	if !ok || isNull(raw) {
		if qc, ok := top["quantization_config"]; ok && !isNull(qc) {
			var m struct {
				Method    string `json:"quant_method"`
				Format    string `json:"format"`
				ScaleFmt  string `json:"scale_fmt"`
				BlockSize []int  `json:"weight_block_size"`
			}
			json.Unmarshal(qc, &m)
			switch {
			case m.Method == "mxfp4":
				// gpt-oss's published checkpoints, read as mlx-lm reads them:
				// mxfp4 at 4 bits in groups of 32, for the modules whose
				// scales the checkpoint holds
				return &Quantization{Default: QuantParams{GroupSize: 32, Bits: 4, Mode: "mxfp4"}, Modules: map[string]ModuleQuant{}}, nil
			case m.Method == "fp8" && m.ScaleFmt == "ue8m0":
				return nil, &ConfigError{Key: "quantization_config", Msg: "FP8 with power-of-two (ue8m0) scales is MLX's mxfp8, which archgen does not run"}
			case m.Method == "fp8":
				// FP8 codes beside their scales, per tensor or per 128 x 128
				// tile: read as floats at load (dequantFP8), no quantized
				// modules
				return nil, nil
			case m.Method == "compressed-tensors" && m.Format == "pack-quantized":
				// symmetric 4-bit integers in groups of 32 (Kimi K2's INT4
				// checkpoints), read as affine: each group's bias is -8 times
				// its scale, as mlx-lm reads them
				return &Quantization{Default: QuantParams{GroupSize: 32, Bits: 4, Mode: "affine"}, Modules: map[string]ModuleQuant{}, Packed: true}, nil
			case m.Method == "compressed-tensors":
				return nil, &ConfigError{Key: "quantization_config.format", Msg: fmt.Sprintf(
					"compressed-tensors in the format %q is not supported; only pack-quantized (4-bit integers in groups of 32) is", m.Format)}
			}
			return nil, &ConfigError{Key: "quantization_config", Msg: fmt.Sprintf(
				"checkpoints quantized with %q are not supported; only mlx's own quantization block, quant_method mxfp4, fp8 and compressed-tensors' pack-quantized are", m.Method)}
		}
		return nil, nil
	}
	var block map[string]json.RawMessage
	if err := json.Unmarshal(raw, &block); err != nil {
		return nil, &ConfigError{Key: "quantization", Msg: "want an object, got " + clip(raw)}
	}
	q := &Quantization{Modules: map[string]ModuleQuant{}}
	def, err := quantParams(block, true, QuantParams{})
	if err != nil {
		return nil, &ConfigError{Key: "quantization", Msg: err.Error()}
	}
	q.Default = def
	keys := make([]string, 0, len(block))
	for k := range block {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := block[k]
		if k == "group_size" || k == "bits" || k == "mode" || k == "quantize_activations" {
			continue
		}
		var on bool
		if json.Unmarshal(v, &on) == nil {
			q.Modules[k] = ModuleQuant{Off: !on}
			continue
		}
		var sub map[string]json.RawMessage
		if json.Unmarshal(v, &sub) != nil || sub == nil {
			return nil, &ConfigError{Key: "quantization." + k, Msg: "want true, false or an object, got " + clip(v)}
		}
		if v, ok := sub["parts"]; ok {
			m, err := moduleParts(v, sub)
			if err != nil {
				return nil, &ConfigError{Key: "quantization." + k, Msg: err.Error()}
			}
			q.Modules[k] = m
			continue
		}
		// mlx's to_quantized fills what an entry leaves out from the mode's
		// defaults (affine: group 64, 4 bits), not from the block's.
		p, err := quantParams(sub, false, QuantParams{GroupSize: 64, Bits: 4, Mode: "affine"})
		if err != nil {
			return nil, &ConfigError{Key: "quantization." + k, Msg: err.Error()}
		}
		q.Modules[k] = ModuleQuant{Params: &p}
	}
	return q, nil
}

// moduleParts reads a module's {"parts": N, "part_groups": G} entry.
func moduleParts(parts json.RawMessage, sub map[string]json.RawMessage) (ModuleQuant, error) {
	n, err := decodeInt(parts)
	if err != nil || n < 2 {
		return ModuleQuant{}, fmt.Errorf("parts: want a whole number of at least 2, got %s", clip(parts))
	}
	m := ModuleQuant{Parts: n, PartGroups: 1}
	for k, v := range sub {
		switch k {
		case "parts":
		case "part_groups":
			g, err := decodeInt(v)
			if err != nil || g < 1 {
				return ModuleQuant{}, fmt.Errorf("part_groups: want a whole number of at least 1, got %s", clip(v))
			}
			m.PartGroups = g
		default:
			return ModuleQuant{}, fmt.Errorf("%s: a module held as parts takes parts and part_groups alone", k)
		}
	}
	return m, nil
}

func quantParams(m map[string]json.RawMessage, required bool, def QuantParams) (QuantParams, error) {
	p := def
	if p.Mode == "" {
		p.Mode = "affine"
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"group_size", &p.GroupSize}, {"bits", &p.Bits}} {
		v, ok := m[f.key]
		if !ok || isNull(v) {
			if required {
				return p, fmt.Errorf("%s: missing (required)", f.key)
			}
			continue
		}
		n, err := decodeInt(v)
		if err != nil {
			return p, fmt.Errorf("%s: %v", f.key, err)
		}
		*f.dst = n
	}
	if v, ok := m["mode"]; ok && !isNull(v) {
		if json.Unmarshal(v, &p.Mode) != nil {
			return p, fmt.Errorf("mode: want a string, got %s", clip(v))
		}
	}
	return p, p.check()
}

// check reports parameters the kernels cannot run: affine quantization,
// and MLX's mxfp4 mode (4-bit floats in groups of 32 sharing a power-of-two
// scale, gpt-oss's experts).
func (p QuantParams) check() error {
	if f, ok := mlx.BlockFormatOfMode(p.Mode); ok {
		if p.GroupSize != f.Values || p.Bits != f.Bits {
			return fmt.Errorf("mode %s is %d bits in blocks of %d, not %d bits in groups of %d", p.Mode, f.Bits, f.Values, p.Bits, p.GroupSize)
		}
		return nil
	}
	if p.Mode == "mxfp4" {
		if p.GroupSize != 32 || p.Bits != 4 {
			return fmt.Errorf("mode mxfp4 is 4 bits in groups of 32, not %d bits in groups of %d", p.Bits, p.GroupSize)
		}
		return nil
	}
	if p.Mode != "affine" {
		return fmt.Errorf("mode %q is not supported (affine, mxfp4, or one of llama.cpp's block types: gguf_q4_k and the like)", p.Mode)
	}
	if !slices.Contains(quantGroupSizes, p.GroupSize) {
		return fmt.Errorf("group size %d is not supported (want 32, 64 or 128)", p.GroupSize)
	}
	if !slices.Contains(quantBits, p.Bits) {
		return fmt.Errorf("%d bits are not supported (want 2, 3, 4, 5, 6 or 8)", p.Bits)
	}
	return nil
}

// PackedDims is the width of a row of in values packed at bits each into
// uint32 words; for a block format, the bytes of the row (uint8).
func (p QuantParams) PackedDims(in int) int {
	if f, ok := p.block(); ok {
		return f.RowBytes(in)
	}
	return in * p.Bits / 32
}

// block is the block format of p's mode, when it is one of llama.cpp's
// block-quantized types: the weight is then uint8 rows of blocks, with the
// scales inside them.
func (p QuantParams) block() (mlx.BlockFormat, bool) { return mlx.BlockFormatOfMode(p.Mode) }

// affine says the mode keeps per-group biases beside its scales (the
// floating-point modes have none).
func (p QuantParams) affine() bool { return p.Mode == "" || p.Mode == "affine" }
