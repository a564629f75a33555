package archgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// EmbedDefaults are the embedding options a model's folder asks for, as
// sentence-transformers writes them beside the weights: modules.json lists
// the modules after the model, a Pooling module (its folder's config.json
// names the pooling: pooling_mode_lasttoken, pooling_mode_mean_tokens,
// pooling_mode_cls_token) and a Normalize module or none. Qwen3-Embedding's
// folder asks for the last token's state, normalized; all-MiniLM-L6-v2's for
// the mean, normalized. A GGUF file's are its pooling_type, normalized (as
// llama-server gives them). ok is false where the folder has no
// modules.json (a model saved without sentence-transformers' files) or the
// GGUF file names no pooling: Embed's own defaults then hold. Dense modules
// after the pooling (EmbeddingGemma's two) are read into opts.Dense. A
// folder whose modules ask for what Embed does not do (max pooling, an
// activation other than Identity or Tanh) is an error naming the file.
func (m *Model) EmbedDefaults() (opts EmbedOptions, ok bool, err error) {
	if m.Source.Kind == KindGGUF && m.ggufPooling != "" {
		return EmbedOptions{Pooling: m.ggufPooling}, true, nil
	}
	if m.Source.Kind != KindDir {
		return opts, false, nil
	}
	path := filepath.Join(m.Source.Path, "modules.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return opts, false, nil
	}
	if err != nil {
		return opts, false, err
	}
	var modules []struct {
		Type string `json:"type"`
		Path string `json:"path"`
	}
	if err := json.Unmarshal(data, &modules); err != nil {
		return opts, false, fmt.Errorf("%s: want a list of modules ({\"type\", \"path\"}): %v", path, err)
	}
	opts.NoNormalize = true
	pooled := false
	for i, mod := range modules {
		switch mod.Type {
		case "sentence_transformers.models.Transformer":
		case "sentence_transformers.models.Normalize":
			opts.NoNormalize = false
		case "sentence_transformers.models.Dense":
			if !pooled {
				return opts, false, fmt.Errorf("%s: module %d, a Dense module, comes before the Pooling module; archgen runs Dense modules on the pooled vectors", path, i)
			}
			d, err := readDense(filepath.Join(m.Source.Path, mod.Path))
			if err != nil {
				return opts, false, err
			}
			opts.Dense = append(opts.Dense, d)
		case "sentence_transformers.models.Pooling":
			p, err := readPooling(filepath.Join(m.Source.Path, mod.Path, "config.json"))
			if err != nil {
				return opts, false, err
			}
			opts.Pooling, pooled = p, true
		default:
			return opts, false, fmt.Errorf("%s: module %d is a %s, which archgen's embeddings do not run (they pool, run Dense modules and normalize)", path, i, mod.Type)
		}
	}
	if !pooled {
		return opts, false, fmt.Errorf("%s: no sentence_transformers.models.Pooling module: the pooling is not said", path)
	}
	return opts, true, nil
}

// readPooling is the pooling a Pooling module's config.json names.
func readPooling(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("%s: not a JSON object: %v", path, err)
	}
	var modes []string
	for k, v := range cfg {
		if on, _ := v.(bool); on && len(k) > len("pooling_mode_") && k[:len("pooling_mode_")] == "pooling_mode_" {
			modes = append(modes, k)
		}
	}
	if len(modes) != 1 {
		return "", fmt.Errorf("%s: %d pooling modes on (%v); archgen pools by one, pooling_mode_lasttoken, pooling_mode_mean_tokens or pooling_mode_cls_token", path, len(modes), modes)
	}
	switch modes[0] {
	case "pooling_mode_lasttoken":
		return PoolLast, nil
	case "pooling_mode_mean_tokens":
		return PoolMean, nil
	case "pooling_mode_cls_token":
		return PoolCLS, nil
	}
	return "", fmt.Errorf("%s: %s, which archgen's embeddings do not do (pooling_mode_lasttoken, pooling_mode_mean_tokens and pooling_mode_cls_token are)", path, modes[0])
}
