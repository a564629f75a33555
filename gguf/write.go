package gguf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/archgen/archgen/runtime/mlx"
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
