package gguf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/tokenizer"
)

// WriteDir saves m as a Hugging Face model directory: config.json,
// model.safetensors, tokenizer.json and tokenizer_config.json. mlx-lm's
// load reads it. Modules in MLX's affine form stay so (the config's
// quantization block lists them); mlx has no form for llama.cpp's other
// block-quantized types, so their modules are written as the float32
// values the blocks decode to (llama.cpp's own dequantization, to the
// bit), and so are the modules held as parts of different types: their
// parts decoded and joined as the module's weight.
func (m *Model) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := maps.Clone(m.Config)
	quant, _ := cfg["quantization"].(map[string]any)
	delete(cfg, "quantization")
	g := mlx.NewGraph(nil)
	defer g.Close()
	joined, err := joinParts(g, quant, m.Tensors)
	if err != nil {
		return err
	}
	out := map[string]*mlx.Array{}
	for name, a := range m.Tensors {
		if _, ok := joined[name]; ok {
			continue
		}
		out[name] = a
		mode, ok := moduleMode(quant, strings.TrimSuffix(name, ".weight"))
		if !ok || !strings.HasSuffix(name, ".weight") || a.Dtype() != mlx.Uint8 {
			continue
		}
		f, _ := mlx.BlockFormatOfMode(mode)
		out[name] = g.BlockDequantize(a, f, mlx.Float32)
	}
	for name, a := range joined {
		if a != nil {
			out[name] = a
		}
	}
	if err := g.Err(); err != nil {
		return err
	}
	if q := affineBlock(quant, out); q != nil {
		cfg["quantization"] = q
	}
	files := map[string]any{
		"config.json":           cfg,
		"tokenizer.json":        m.TokenizerJSON,
		"tokenizer_config.json": m.TokenizerConfig,
	}
	for name, v := range files {
		if err := writeJSON(filepath.Join(dir, name), v); err != nil {
			return err
		}
	}
	return mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), out, map[string]string{"format": "mlx"})
}

// joinParts is the float32 weight of each module the quantization block
// holds as parts ({"parts": N, "part_groups": G}): every part decoded and
// the rows joined as reading joins a projection, by name; the parts'
// tensors map to nil (not written).
func joinParts(g *mlx.Graph, quant map[string]any, tensors map[string]*mlx.Array) (map[string]*mlx.Array, error) {
	out := map[string]*mlx.Array{}
	for module, e := range quant {
		spec, ok := e.(map[string]any)
		if !ok || spec["parts"] == nil {
			continue
		}
		n, groups := wholeNumber(spec["parts"]), wholeNumber(spec["part_groups"])
		xs := make([]*mlx.Array, n)
		for j := range n {
			part := fmt.Sprintf("%s.parts.%d", module, j)
			w, ok := tensors[part+".weight"]
			if !ok {
				return nil, fmt.Errorf("%s: part %d has no weight", module, j)
			}
			mode, block := moduleMode(quant, part)
			switch scales := tensors[part+".scales"]; {
			case scales != nil:
				bits, _ := quant["bits"].(int)
				if pe, ok := quant[part].(map[string]any); ok {
					bits, _ = pe["bits"].(int)
				}
				xs[j] = g.Dequantize(mlx.Quantized{Weight: w, Scales: scales, Biases: tensors[part+".biases"], GroupSize: 32, Bits: bits, Mode: "affine"}, mlx.Float32)
			case block && w.Dtype() == mlx.Uint8:
				f, _ := mlx.BlockFormatOfMode(mode)
				xs[j] = g.BlockDequantize(w, f, mlx.Float32)
			default:
				xs[j] = g.AsType(w, mlx.Float32)
			}
			for _, suffix := range []string{".weight", ".scales", ".biases"} {
				if _, ok := tensors[part+suffix]; ok {
					out[part+suffix] = nil
				}
			}
		}
		w, err := joinGroups(g, xs, max(groups, 1), false)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", module, err)
		}
		out[module+".weight"] = w
	}
	return out, nil
}

// affineBlock is the quantization block of the modules held in MLX's
// affine form (those with scales), each listed with its bits; nil when
// there are none.
func affineBlock(quant map[string]any, tensors map[string]*mlx.Array) map[string]any {
	var out map[string]any
	for name := range tensors {
		module, ok := strings.CutSuffix(name, ".scales")
		if !ok {
			continue
		}
		bits, _ := quant["bits"].(int)
		if e, ok := quant[module].(map[string]any); ok {
			bits, _ = e["bits"].(int)
		}
		if out == nil {
			out = map[string]any{"group_size": 32, "bits": bits, "mode": "affine"}
		}
		out[module] = map[string]any{"group_size": 32, "bits": bits, "mode": "affine"}
	}
	return out
}

// moduleMode is the block format's mode a quantization block gives module:
// its own entry, or the default.
func moduleMode(quant map[string]any, module string) (string, bool) {
	if quant == nil {
		return "", false
	}
	mode, _ := quant["mode"].(string)
	if e, ok := quant[module].(map[string]any); ok {
		mode, _ = e["mode"].(string)
	}
	return mode, mlx.IsBlockMode(mode)
}

// writeJSON writes v indented, keys sorted, without HTML escaping (chat
// templates are full of < and >).
func writeJSON(path string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// Load runs the checkpoint with load (registry.Load, which picks the
// generated architecture by model_type), as a model directory of its
// config.json and tensors. The model takes the tensors over: m holds none
// afterwards.
func (m *Model) Load(opts nn.Options, load func(dir string, opts nn.Options) (nn.Model, error)) (nn.Model, error) {
	cfg, err := json.Marshal(m.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: config: %w", m.Path, err)
	}
	opts.Config, opts.Tensors = cfg, m.Tensors
	m.Tensors = nil
	return load(m.Path, opts)
}

// Tokenizer is the tokenizer the file's vocabulary describes, as the
// tokenizer.json and tokenizer_config.json WriteDir writes would load.
func (m *Model) Tokenizer() (*tokenizer.Pretrained, error) {
	tj, err := json.Marshal(m.TokenizerJSON)
	if err != nil {
		return nil, err
	}
	t, err := tokenizer.Parse(tj)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", m.Path, err)
	}
	cj, err := json.Marshal(m.TokenizerConfig)
	if err != nil {
		return nil, err
	}
	c, err := tokenizer.ParseConfig(cj)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer config: %w", m.Path, err)
	}
	if c.ChatTemplate != "" {
		c.ChatTemplateSource = m.Path + " (tokenizer.chat_template)"
	}
	p, err := tokenizer.NewPretrained(t, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Path, err)
	}
	return p, nil
}
