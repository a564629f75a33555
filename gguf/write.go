package gguf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/tokenizer"
)

// WriteDir saves m as a Hugging Face model directory: config.json,
// model.safetensors (quantized modules as MLX stores them), tokenizer.json
// and tokenizer_config.json. mlx-lm's load reads it.
func (m *Model) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]any{
		"config.json":           m.Config,
		"tokenizer.json":        m.TokenizerJSON,
		"tokenizer_config.json": m.TokenizerConfig,
	}
	for name, v := range files {
		if err := writeJSON(filepath.Join(dir, name), v); err != nil {
			return err
		}
	}
	return mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), m.Tensors, map[string]string{"format": "mlx"})
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
	p, err := tokenizer.NewPretrained(t, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Path, err)
	}
	return p, nil
}
