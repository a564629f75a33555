package gguf

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Pre-tokenizer splits of llama.cpp's byte-level vocabularies, by the
// tokenizer.ggml.pre name the converter wrote: the regular expressions
// llama.cpp splits the text with, each applied to the pieces the one
// before left (as a Sequence of Splits does), then the bytes spelled in
// GPT-2's alphabet.
const (
	contractions = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])`
	gpt2Split    = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	llama3Split  = contractions + `|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}` +
		`| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Split = contractions + `|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}` +
		`| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// a run of letters: capitals then small ones, or the other way round
	// (any letter outside a-z counts as a capital, and outside A-Z as small)
	capitalized = `[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+`
	upper       = `[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*`
	tekkenSplit = capitalized + `|` + upper + `|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	gpt4oSplit  = capitalized + contractions + `?|` + upper + contractions +
		`?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	cjk        = `[一-龥぀-ゟ゠-ヿ]+`
	deepseekV3 = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+` +
		`| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// preSplits are llama.cpp's splits by pre type, for the types that are not
// GPT-2's alone.
var preSplits = map[string][]string{
	"default":     {`[\p{P}\$\+<=>\^~\|]+`, gpt2Split, `\p{N}+`, `[0-9][0-9][0-9]`},
	"llama3":      {llama3Split},
	"qwen2":       {qwen2Split},
	"smollm":      {`\p{N}`, gpt2Split},
	"tekken":      {tekkenSplit},
	"gpt-4o":      {gpt4oSplit},
	"deepseek-v3": {`\p{N}{1,3}`, cjk, deepseekV3},
	"falcon":      {`[\p{P}\$\+<=>\^~\|` + "`" + `]+`, gpt2Split, `[0-9][0-9][0-9]`},
}

// preAliases are the pre types llama.cpp splits as another does.
var preAliases = map[string]string{
	"": "default", "llama-v3": "llama3", "llama-bpe": "llama3", "smaug-bpe": "llama3", "dbrx": "llama3",
	"falcon3": "llama3", "pixtral": "llama3", "chatglm-bpe": "llama3", "glm4": "llama3",
	"deepseek-r1-qwen": "qwen2", "stablelm2": "qwen2", "hunyuan": "qwen2",
	"starcoder": "smollm", "refact": "smollm", "command-r": "smollm", "codeshell": "smollm", "exaone": "smollm",
	"llama4": "gpt-4o", "minimax-m2": "gpt-4o", "hunyuan-dense": "deepseek-v3",
	"gpt2": "gpt-2", "phi-2": "gpt-2", "mpt": "gpt-2", "olmo": "gpt-2", "jais": "gpt-2", "exaone4": "gpt-2",
}

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
	if to, ok := preAliases[pre]; ok {
		pre = to
	}
	if pre == "gpt-2" {
		return byteLevel(true), nil
	}
	regexes, ok := preSplits[pre]
	if !ok {
		return nil, fmt.Errorf("tokenizer pre-type %q is not supported", pre)
	}
	steps := make([]map[string]any, 0, len(regexes)+1)
	for _, r := range regexes {
		steps = append(steps, split(r))
	}
	return sequence(append(steps, byteLevel(false))...), nil
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

// tokenizerFiles makes tokenizer.json and tokenizer_config.json from the
// file's vocabulary: byte-level BPE (tokenizer.ggml.model "gpt2", its
// tokens already spelled in the byte alphabet, its merges listed) and
// SentencePiece's (tokenizer.ggml.model "llama": scored pieces with
// byte-fallback tokens, as Llama 2's, Mistral's and Gemma's files hold).
func tokenizerFiles(md metadata, cfg map[string]any) (map[string]any, map[string]any, error) {
	kind, err := md.str("tokenizer.ggml.model")
	if err != nil {
		return nil, nil, err
	}
	if kind != "gpt2" && kind != "llama" && kind != "bert" && kind != "gemma4" {
		return nil, nil, fmt.Errorf("%s: tokenizer.ggml.model %q is not supported (byte-level BPE, \"gpt2\", SentencePiece, \"llama\", WordPiece, \"bert\", and Gemma 4's BPE of pieces, \"gemma4\", are)", md.path, kind)
	}
	tokens, err := md.strs("tokenizer.ggml.tokens")
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
	vocab := make(map[string]any, len(tokens))
	var added []any
	for i, t := range tokens {
		if _, dup := vocab[t]; !dup {
			vocab[t] = i
		}
		if types[i] == tokenControl || types[i] == tokenUserDefined {
			added = append(added, map[string]any{
				"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
				"normalized": false, "special": types[i] == tokenControl,
			})
		}
	}
	var tok map[string]any
	switch kind {
	case "gpt2":
		tok, err = byteLevelTokenizer(md, vocab)
	case "bert":
		tok, err = wordPieceTokenizer(md, tokens, types)
	case "gemma4":
		tok, err = pieceBPETokenizer(md, vocab)
	default:
		tok, err = pieceTokenizer(md, tokens, types, vocab)
	}
	if err != nil {
		return nil, nil, err
	}
	tok["version"] = "1.0"
	tok["truncation"] = nil
	tok["padding"] = nil
	tok["added_tokens"] = added
	tc := map[string]any{
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"clean_up_tokenization_spaces": false,
		"model_max_length":             cfg["max_position_embeddings"],
		"add_bos_token":                false,
		"add_eos_token":                false,
	}
	if tc["add_bos_token"], err = md.flag("tokenizer.ggml.add_bos_token", false); err != nil {
		return nil, nil, err
	}
	if kind == "gemma4" {
		tc["add_bos_token"] = true // whatever the file says, as llama.cpp reads Gemma 4's
	}
	for _, k := range []struct{ gguf, hf string }{
		{"tokenizer.ggml.bos_token_id", "bos_token"},
		{"tokenizer.ggml.eos_token_id", "eos_token"},
		{"tokenizer.ggml.unknown_token_id", "unk_token"},
		{"tokenizer.ggml.padding_token_id", "pad_token"},
	} {
		id, err := md.tokenID(k.gguf, len(tokens), -1)
		if err != nil {
			return nil, nil, err
		}
		if id >= 0 {
			tc[k.hf] = tokens[id]
		}
	}
	if tc["add_bos_token"] == true && kind != "bert" {
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

// byteLevelTokenizer is tokenizer.json's model, normalizer, pre-tokenizer,
// post-processor and decoder for a byte-level BPE vocabulary.
func byteLevelTokenizer(md metadata, vocab map[string]any) (map[string]any, error) {
	merges, err := md.strs("tokenizer.ggml.merges")
	if err != nil {
		return nil, err
	}
	pre := ""
	if md.has("tokenizer.ggml.pre") {
		if pre, err = md.str("tokenizer.ggml.pre"); err != nil {
			return nil, err
		}
	}
	pt, err := preTokenizer(pre)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", md.path, err)
	}
	pairs := make([]any, len(merges))
	for i, m := range merges {
		a, b, ok := cutSpace(m)
		if !ok {
			return nil, fmt.Errorf("%s: merge %d (%q) is not two tokens", md.path, i, m)
		}
		pairs[i] = []any{a, b}
	}
	return map[string]any{
		"normalizer":     nil,
		"pre_tokenizer":  pt,
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": pairs,
		},
	}, nil
}

// pieceSpace is SentencePiece's spelling of a space.
const pieceSpace = "\u2581"

// pieceTokenizer is tokenizer.json for a SentencePiece vocabulary, as BPE
// with byte fallback: llama.cpp joins the adjacent pair whose joined piece
// has the highest score, over and over, and BPE does the same with merges
// ranked by those scores. The merges are every split of a piece into two
// pieces, ranked by the joined piece's score (the vocabulary's order
// among equal scores). Spaces are the piece space; with add_space_prefix
// (llama.cpp's default) one is put before the text, and decoding takes it
// off again.
func pieceTokenizer(md metadata, tokens []string, types []int32, vocab map[string]any) (map[string]any, error) {
	v, err := md.get("tokenizer.ggml.scores")
	if err != nil {
		return nil, err
	}
	if v.Kind != ValueNumbers || len(v.Nums) != len(tokens) {
		return nil, fmt.Errorf("%s: tokenizer.ggml.scores is not a list of %d numbers (one a token)", md.path, len(tokens))
	}
	scores := v.Nums
	prefix, err := md.flag("tokenizer.ggml.add_space_prefix", true)
	if err != nil {
		return nil, err
	}
	// pieces that take part in merges: the normal ones, each by its first id
	piece := make(map[string]int, len(tokens))
	for i, t := range tokens {
		if types[i] == tokenNormal || types[i] == 0 {
			if _, dup := piece[t]; !dup {
				piece[t] = i
			}
		}
	}
	type merge struct {
		a, b  string
		id    int
		score float64
	}
	var merges []merge
	for t, id := range piece {
		for i := range t {
			if i == 0 {
				continue
			}
			if _, ok := piece[t[:i]]; !ok {
				continue
			}
			if _, ok := piece[t[i:]]; ok {
				merges = append(merges, merge{t[:i], t[i:], id, scores[id]})
			}
		}
	}
	sort.Slice(merges, func(i, j int) bool {
		x, y := merges[i], merges[j]
		if x.score != y.score {
			return x.score > y.score
		}
		if x.id != y.id {
			return x.id < y.id
		}
		return len(x.a) < len(y.a)
	})
	pairs := make([]any, len(merges))
	for i, m := range merges {
		pairs[i] = []any{m.a, m.b}
	}
	var unk any
	id, err := md.tokenID("tokenizer.ggml.unknown_token_id", len(tokens), -1)
	if err != nil {
		return nil, err
	}
	if id >= 0 {
		unk = tokens[id]
	}
	replace := map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": pieceSpace}
	normalizer := replace
	decoders := []any{
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": pieceSpace}, "content": " "},
		map[string]any{"type": "ByteFallback"},
		map[string]any{"type": "Fuse"},
	}
	if prefix {
		normalizer = map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": pieceSpace}, replace}}
		decoders = append(decoders, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0})
	}
	return map[string]any{
		"normalizer":     normalizer,
		"pre_tokenizer":  nil,
		"post_processor": nil,
		"decoder":        map[string]any{"type": "Sequence", "decoders": decoders},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": vocab, "merges": pairs,
		},
	}, nil
}

// pieceBPETokenizer is tokenizer.json for Gemma 4's vocabulary
// (tokenizer.ggml.model "gemma4"): BPE over the text's UTF-8 characters
// with the file's merges, its pieces spelled with the piece space; spaces
// become the piece space, the text is split only into runs of newlines and
// runs of anything else, and characters no piece spells fall back to the
// <0xXX> tokens of their bytes, as llama.cpp tokenizes it.
func pieceBPETokenizer(md metadata, vocab map[string]any) (map[string]any, error) {
	merges, err := md.strs("tokenizer.ggml.merges")
	if err != nil {
		return nil, err
	}
	pairs := make([]any, len(merges))
	for i, m := range merges {
		a, b, ok := cutSpace(m)
		if !ok {
			return nil, fmt.Errorf("%s: merge %d (%q) is not two tokens", md.path, i, m)
		}
		pairs[i] = []any{a, b}
	}
	return map[string]any{
		"normalizer": map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": pieceSpace},
		"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "[^\n]+|[\n]+"},
			"behavior": "Isolated", "invert": false},
		"post_processor": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": pieceSpace}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
		}},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": true, "ignore_merges": false,
			"vocab": vocab, "merges": pairs,
		},
	}, nil
}

// llama.cpp's special tokens of a WordPiece vocabulary where the file names
// none: BERT's [UNK], [CLS] and [SEP].
const (
	wordPieceUnk = 100
	wordPieceCLS = 101
	wordPieceSep = 102
)

// wordPieceTokenizer is tokenizer.json's model, normalizer, pre-tokenizer,
// post-processor and decoder for llama.cpp's WordPiece vocabulary ("bert"),
// which its converter spells with a phantom space: a piece that starts a
// word has a leading ▁ and one that continues a word has none (BERT's ## is
// dropped); control tokens are as they are. The pieces are spelled back as
// BERT's, and the text is split as llama.cpp splits it: NFD and accents
// dropped (tokenizer.ggml.normalizer.strip_accents, by default what
// lowercase is), lowercased (tokenizer.ggml.normalizer.lowercase, default
// true: llama.cpp's converter writes neither key), control characters dropped, words split at whitespace and around
// punctuation and CJK characters, each word cut into the longest pieces from
// its start (no limit on a word's length) or, where that fails, the unknown
// token. Special tokens add the [CLS] (bos) before and the [SEP] after, as
// llama.cpp adds them; a pair is [CLS] A [SEP] B [SEP], B and its [SEP] of
// type 1, as BERT's tokenizer makes it.
func wordPieceTokenizer(md metadata, tokens []string, types []int32) (map[string]any, error) {
	vocab := make(map[string]any, len(tokens))
	for i, t := range tokens {
		piece := t
		switch {
		case types[i] == tokenControl:
		case strings.HasPrefix(t, pieceSpace):
			piece = t[len(pieceSpace):]
		default:
			piece = "##" + t
		}
		if _, dup := vocab[piece]; !dup {
			vocab[piece] = i
		}
	}
	unk, err := md.tokenID("tokenizer.ggml.unknown_token_id", len(tokens), wordPieceUnk)
	if err != nil {
		return nil, err
	}
	cls, err := md.tokenID("tokenizer.ggml.bos_token_id", len(tokens), wordPieceCLS)
	if err != nil {
		return nil, err
	}
	sep, err := md.tokenID("tokenizer.ggml.seperator_token_id", len(tokens), wordPieceSep)
	if err != nil {
		return nil, err
	}
	lower, err := md.flag("tokenizer.ggml.normalizer.lowercase", true)
	if err != nil {
		return nil, err
	}
	strip, err := md.flag("tokenizer.ggml.normalizer.strip_accents", lower)
	if err != nil {
		return nil, err
	}
	clsTok, sepTok := tokens[cls], tokens[sep]
	specials := map[string]any{
		clsTok: map[string]any{"id": clsTok, "ids": []any{cls}, "tokens": []any{clsTok}},
		sepTok: map[string]any{"id": sepTok, "ids": []any{sep}, "tokens": []any{sepTok}},
	}
	return map[string]any{
		"normalizer":    map[string]any{"type": "LlamaCppWordPiece", "strip_accents": strip, "lowercase": lower},
		"pre_tokenizer": map[string]any{"type": "WhitespaceSplit"},
		"post_processor": map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{special(clsTok), seq("A"), special(sepTok)},
			"pair": []any{special(clsTok), seq("A"), special(sepTok), seq("B"),
				map[string]any{"SpecialToken": map[string]any{"id": sepTok, "type_id": 1}}},
			"special_tokens": specials,
		},
		"decoder": map[string]any{"type": "WordPiece", "prefix": "##", "cleanup": true},
		"model": map[string]any{
			"type": "WordPiece", "unk_token": tokens[unk], "continuing_subword_prefix": "##",
			"max_input_chars_per_word": math.MaxInt32, "vocab": vocab,
		},
	}, nil
}
