// Package tinychat writes a tiny chat checkpoint for tests and examples: the
// weights of a parity case's float32 llama (made by mlx-lm, 256 tokens of
// vocabulary), or of its hybrid of attention and recurrent layers
// (WriteHybrid), beside a tokenizer written here by hand for that
// vocabulary.
//
// The tokenizer is byte-level BPE without merges: ids 0-250 are the bytes
// 0x00-0xFA (every byte valid UTF-8 uses), each under GPT-2's byte-to-
// character mapping, and ids 251-255 are special tokens: <|im_start|>,
// <|im_end|>, <|endoftext|> (the eos token), <s> (the bos token, which the
// post-processor adds) and <pad>. The chat template is ChatML, opened by
// the bos token.
package tinychat

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// The special tokens' ids.
const (
	IMStart   = 251
	IMEnd     = 252
	EndOfText = 253
	BOS       = 254
	Pad       = 255
)

// Template is the chat template tokenizer_config.json holds.
const Template = "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
	"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"

// WeightsDir is the parity case whose weights the checkpoint uses.
func WeightsDir() string { return parityModel("llama", "base") }

// HybridWeightsDir is the parity case whose weights WriteHybrid uses: a
// qwen3_next of gated attention (layers 1 and 3) and gated delta layers
// (0 and 2), with mixtures of experts.
func HybridWeightsDir() string { return parityModel("qwen3_next", "base") }

func parityModel(arch, name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "parity", arch, name, "model")
}

// byteChars is GPT-2's mapping of bytes to printable characters.
func byteChars() []rune {
	out := make([]rune, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			out[b] = rune(b)
		} else {
			out[b] = rune(256 + n)
			n++
		}
	}
	return out
}

// Write makes the checkpoint in dir: config.json and model.safetensors of
// the parity llama, tokenizer.json, tokenizer_config.json; and, when
// generation is not nil, a generation_config.json of it. config, when not
// nil, is merged into config.json (eos_token_id, say).
func Write(dir string, config, generation map[string]any) error {
	return write(dir, WeightsDir(), config, generation)
}

// WriteHybrid is Write with the weights of HybridWeightsDir.
func WriteHybrid(dir string, config, generation map[string]any) error {
	return write(dir, HybridWeightsDir(), config, generation)
}

// WriteParity is WriteHybrid on the weights of another parity case of 256
// tokens (arch/name under testdata/parity): a state-space or other
// recurrent model to chat with.
func WriteParity(dir, arch, name string, config, generation map[string]any) error {
	return write(dir, parityModel(arch, name), config, generation)
}

func write(dir, src string, config, generation map[string]any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(src, "model.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
		return err
	}
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	cfg["bos_token_id"], cfg["eos_token_id"] = BOS, EndOfText
	for k, v := range config {
		cfg[k] = v
	}
	vocab := map[string]int{}
	for b, r := range byteChars()[:251] {
		vocab[string(r)] = b
	}
	specials := []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "<pad>"}
	var added []map[string]any
	for i, s := range specials {
		vocab[s] = 251 + i
		added = append(added, map[string]any{"id": 251 + i, "content": s, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	tok := map[string]any{
		"version":       "1.0",
		"truncation":    nil,
		"padding":       nil,
		"added_tokens":  added,
		"normalizer":    nil,
		"pre_tokenizer": byteLevel,
		"post_processor": map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{BOS}, "tokens": []string{"<s>"}}},
		},
		"decoder": byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": []any{}},
	}
	tcfg := map[string]any{
		"bos_token": "<s>", "eos_token": "<|endoftext|>", "pad_token": "<pad>",
		"chat_template": Template, "tokenizer_class": "PreTrainedTokenizerFast",
		"model_max_length": 2048, "clean_up_tokenization_spaces": false,
	}
	files := map[string]any{"config.json": cfg, "tokenizer.json": tok, "tokenizer_config.json": tcfg}
	if generation != nil {
		files["generation_config.json"] = generation
	}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
