package archgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// StopTokens is the set of ids that end a turn, as mlx-lm builds it when it
// loads a model directory:
//
//   - config.json's eos_token_id (an id or a list of ids);
//   - generation_config.json's eos_token_id in its place, when that file
//     has a non-zero id or a non-empty list (a generation_config.json that
//     is not JSON is ignored, as mlx-lm ignores it);
//   - and the tokenizer's own eos token (tokenizerEOS; -1 for none).
//
// config and generation are the two files' bytes, nil when absent. The ids
// come back sorted, each once. An eos_token_id of another type is an error
// naming the file and the key.
//
// Gemma-2 instruction checkpoints list [1, 107] (<eos> and <end_of_turn>)
// in config.json, GLM-4 three ids, while their tokenizers name only one:
// without the lists a chat runs past the end of its turn.
func StopTokens(config, generation []byte, tokenizerEOS int32) ([]int32, error) {
	ids, err := eosIDs(config, "config.json", true)
	if err != nil {
		return nil, err
	}
	if generation != nil {
		gen, err := eosIDs(generation, "generation_config.json", false)
		if err != nil {
			return nil, err
		}
		// mlx-lm takes the file's value when it is truthy: a non-zero id
		// or a non-empty list.
		if len(gen) > 0 && !(len(gen) == 1 && gen[0] == 0 && !isList(generation)) {
			ids = gen
		}
	}
	if tokenizerEOS >= 0 {
		ids = append(ids, tokenizerEOS)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// isList tells whether the file's eos_token_id is a JSON list.
func isList(data []byte) bool {
	var f struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	_ = json.Unmarshal(data, &f)
	return len(f.EOS) > 0 && f.EOS[0] == '['
}

// eosIDs reads eos_token_id from a JSON object. strict says whether a file
// that is not a JSON object is an error (config.json) or has none
// (generation_config.json, as mlx-lm reads it).
func eosIDs(data []byte, file string, strict bool) ([]int32, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(data, &f); err != nil {
		if strict {
			return nil, fmt.Errorf("%s: not a JSON object: %v", file, err)
		}
		return nil, nil
	}
	raw, ok := f["eos_token_id"]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var one int32
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int32{one}, nil
	}
	var list []int32
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: eos_token_id: want a token id or a list of them, got %s", file, raw)
	}
	return list, nil
}

// dirStopTokens reads the stop set of a model directory.
func dirStopTokens(dir string, tokenizerEOS int32) ([]int32, error) {
	config, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	generation, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	ids, err := StopTokens(config, generation, tokenizerEOS)
	if err != nil {
		return nil, fmt.Errorf("%s/%w", dir, err)
	}
	return ids, nil
}
