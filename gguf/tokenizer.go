package gguf

import (
	"fmt"
)

// Pre-tokenizer splits of llama.cpp's byte-level vocabularies, by the
// tokenizer.ggml.pre name the converter wrote. Each is the regular
// expression the vocabulary's merges were learned with.
const (
	llama3Split = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}` +
		`| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Split = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}` +
		`| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// byteLevel is the ByteLevel pre-tokenizer; with useRegex it also splits
// with GPT-2's expression.
func byteLevel(useRegex bool) map[string]any {
	return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": useRegex}
}

func split(pattern string) map[string]any {
	return map[string]any{
		"type": "Split", "pattern": map[string]any{"Regex": pattern},
		"behavior": "Isolated", "invert": false,
	}
}

func sequence(steps ...map[string]any) map[string]any {
	list := make([]any, len(steps))
	for i, s := range steps {
		list[i] = s
	}
	return map[string]any{"type": "Sequence", "pretokenizers": list}
}

// preTokenizer is the Hugging Face pre-tokenizer of a llama.cpp pre type.
func preTokenizer(pre string) (map[string]any, error) {
	switch pre {
	case "", "default", "gpt2", "gpt-2":
		return byteLevel(true), nil
	case "smollm":
		// Each digit alone, then GPT-2's split.
		return sequence(map[string]any{"type": "Digits", "individual_digits": true}, byteLevel(true)), nil
	case "llama3", "llama-v3", "llama-bpe", "smaug-bpe":
		return sequence(split(llama3Split), byteLevel(false)), nil
	case "qwen2", "deepseek-r1-qwen":
		return sequence(split(qwen2Split), byteLevel(false)), nil
	}
	return nil, fmt.Errorf("tokenizer pre-type %q is not supported", pre)
}

// llama.cpp's token types.
const (
	tokenNormal      = 1
	tokenUnknown     = 2
	tokenControl     = 3
	tokenUserDefined = 4
	tokenUnused      = 5
	tokenByte        = 6
)

// tokenizerFiles makes tokenizer.json and tokenizer_config.json from the file's
// vocabulary. Byte-level BPE vocabularies (tokenizer.ggml.model "gpt2") are
// supported: their tokens are already spelled in the byte alphabet.
func tokenizerFiles(md metadata, cfg map[string]any) (map[string]any, map[string]any, error) {
	kind, err := md.str("tokenizer.ggml.model")
	if err != nil {
		return nil, nil, err
	}
	if kind != "gpt2" {
		return nil, nil, fmt.Errorf("%s: tokenizer.ggml.model %q is not supported (only byte-level BPE, \"gpt2\")", md.path, kind)
	}
	tokens, err := md.strs("tokenizer.ggml.tokens")
	if err != nil {
		return nil, nil, err
	}
	merges, err := md.strs("tokenizer.ggml.merges")
	if err != nil {
		return nil, nil, err
	}
	types := make([]int32, len(tokens))
	if md.has("tokenizer.ggml.token_type") {
		if types, err = md.ints("tokenizer.ggml.token_type"); err != nil {
			return nil, nil, err
		}
		if len(types) != len(tokens) {
			return nil, nil, fmt.Errorf("%s: %d token types for %d tokens", md.path, len(types), len(tokens))
		}
	}
	pre := ""
	if md.has("tokenizer.ggml.pre") {
		if pre, err = md.str("tokenizer.ggml.pre"); err != nil {
			return nil, nil, err
		}
	}
	pt, err := preTokenizer(pre)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", md.path, err)
	}
	vocab := make(map[string]any, len(tokens))
	var added []any
	for i, t := range tokens {
		vocab[t] = i
		if types[i] == tokenControl || types[i] == tokenUserDefined {
			added = append(added, map[string]any{
				"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
				"normalized": false, "special": types[i] == tokenControl,
			})
		}
	}
	pairs := make([]any, len(merges))
	for i, m := range merges {
		a, b, ok := cutSpace(m)
		if !ok {
			return nil, nil, fmt.Errorf("%s: merge %d (%q) is not two tokens", md.path, i, m)
		}
		pairs[i] = []any{a, b}
	}
	tok := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   added,
		"normalizer":     nil,
		"pre_tokenizer":  pt,
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": pairs,
		},
	}
	tc := map[string]any{
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"clean_up_tokenization_spaces": false,
		"model_max_length":             cfg["max_position_embeddings"],
		"add_bos_token":                false,
		"add_eos_token":                false,
	}
	if md.has("tokenizer.ggml.add_bos_token") {
		b, err := md.number("tokenizer.ggml.add_bos_token")
		if err != nil {
			return nil, nil, err
		}
		tc["add_bos_token"] = b != 0
	}
	for _, k := range []struct{ gguf, hf string }{
		{"tokenizer.ggml.bos_token_id", "bos_token"},
		{"tokenizer.ggml.eos_token_id", "eos_token"},
		{"tokenizer.ggml.unknown_token_id", "unk_token"},
		{"tokenizer.ggml.padding_token_id", "pad_token"},
	} {
		if !md.has(k.gguf) {
			continue
		}
		id, err := md.int(k.gguf)
		if err != nil {
			return nil, nil, err
		}
		if id < 0 || id >= len(tokens) {
			return nil, nil, fmt.Errorf("%s: %s %d is outside the %d-token vocabulary", md.path, k.gguf, id, len(tokens))
		}
		tc[k.hf] = tokens[id]
	}
	if tc["add_bos_token"] == true {
		bos, ok := tc["bos_token"].(string)
		if !ok {
			return nil, nil, fmt.Errorf("%s: add_bos_token is set but there is no bos token", md.path)
		}
		id := vocab[bos]
		tok["post_processor"] = map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{special(bos), seq("A")},
			"pair":   []any{special(bos), seq("A"), special(bos), seq("B")},
			"special_tokens": map[string]any{
				bos: map[string]any{"id": bos, "ids": []any{id}, "tokens": []any{bos}},
			},
		}
	}
	if md.has("tokenizer.chat_template") {
		if tc["chat_template"], err = md.str("tokenizer.chat_template"); err != nil {
			return nil, nil, err
		}
	}
	return tok, tc, nil
}

func special(id string) map[string]any {
	return map[string]any{"SpecialToken": map[string]any{"id": id, "type_id": 0}}
}

func seq(id string) map[string]any {
	typ := 0
	if id == "B" {
		typ = 1
	}
	return map[string]any{"Sequence": map[string]any{"id": id, "type_id": typ}}
}

// cutSpace splits a merge "a b" at its one space.
func cutSpace(m string) (string, string, bool) {
	for i := 0; i < len(m); i++ {
		if m[i] == ' ' {
			a, b := m[:i], m[i+1:]
			return a, b, a != "" && b != ""
		}
	}
	return "", "", false
}
