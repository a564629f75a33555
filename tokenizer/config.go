package tokenizer

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// Config is what tokenizer_config.json says about using a tokenizer: its
// special tokens, whether to add them, and the chat template.
type Config struct {
	BOSToken string
	EOSToken string
	UNKToken string
	PADToken string
	// CLSToken, SEPToken and MaskToken are read for the classes whose
	// pipelines Load rebuilds (XLMRobertaTokenizer); "" where the file
	// does not say.
	CLSToken  string
	SEPToken  string
	MaskToken string
	// AddedTokensDecoder is added_tokens_decoder: the added tokens by id,
	// with their options, as transformers writes them; nil where the file
	// has none.
	AddedTokensDecoder []AddedToken
	// AddBOS and AddEOS are add_bos_token and add_eos_token; nil where the
	// file does not say. Encode adds what tokenizer.json's post_processor
	// says, which in the checkpoints at hand agrees with them.
	AddBOS *bool
	AddEOS *bool
	// ChatTemplate is the default chat template ("" if none); ChatTemplates
	// holds every named one when the file gives a list.
	ChatTemplate  string
	ChatTemplates map[string]string
	// ChatTemplateSource says where the chat template was read from (a
	// file, or a file and key), for errors; Load and the GGUF reader set it.
	ChatTemplateSource string
	// CleanUpTokenizationSpaces is clean_up_tokenization_spaces, for
	// reference only: Decode never applies it (transformers 5 ignores it
	// for BPE tokenizers too).
	CleanUpTokenizationSpaces bool
	ModelMaxLength            float64
	TokenizerClass            string
	// ToolParserType names the format the model writes tool calls in
	// (tool_parser_type; "" where the file does not say).
	ToolParserType string
	// Legacy and AddPrefixSpace are the sentencepiece options of
	// LlamaTokenizer; nil where the file does not say.
	Legacy         *bool
	AddPrefixSpace *bool
}

// tokenString reads a special token as tokenizer_config.json writes it: a
// string, an {"content": ...} object, or null.
func tokenString(raw json.RawMessage, key string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("%s: want a string or an object with content, got %s", key, raw)
	}
	return *obj.Content, nil
}

// ParseConfig reads the contents of a tokenizer_config.json file.
func ParseConfig(data []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	c := &Config{}
	for key, dst := range map[string]*string{
		"bos_token": &c.BOSToken, "eos_token": &c.EOSToken, "unk_token": &c.UNKToken, "pad_token": &c.PADToken,
		"cls_token": &c.CLSToken, "sep_token": &c.SEPToken, "mask_token": &c.MaskToken,
	} {
		s, err := tokenString(raw[key], key)
		if err != nil {
			return nil, err
		}
		*dst = s
	}
	for key, dst := range map[string]**bool{
		"add_bos_token": &c.AddBOS, "add_eos_token": &c.AddEOS, "legacy": &c.Legacy, "add_prefix_space": &c.AddPrefixSpace,
	} {
		if isNull(raw[key]) {
			continue
		}
		var b bool
		if err := json.Unmarshal(raw[key], &b); err != nil {
			return nil, fmt.Errorf("%s: want true or false, got %s", key, raw[key])
		}
		*dst = &b
	}
	if v := raw["clean_up_tokenization_spaces"]; !isNull(v) {
		if err := json.Unmarshal(v, &c.CleanUpTokenizationSpaces); err != nil {
			return nil, fmt.Errorf("clean_up_tokenization_spaces: want true or false, got %s", v)
		}
	}
	if v := raw["model_max_length"]; !isNull(v) {
		if err := json.Unmarshal(v, &c.ModelMaxLength); err != nil {
			return nil, fmt.Errorf("model_max_length: want a number, got %s", v)
		}
	}
	if v := raw["tool_parser_type"]; !isNull(v) {
		if err := json.Unmarshal(v, &c.ToolParserType); err != nil {
			return nil, fmt.Errorf("tool_parser_type: want a string, got %s", v)
		}
	}
	if v := raw["added_tokens_decoder"]; !isNull(v) {
		if err := c.setAddedTokensDecoder(v); err != nil {
			return nil, err
		}
	}
	if v := raw["tokenizer_class"]; !isNull(v) {
		if err := json.Unmarshal(v, &c.TokenizerClass); err != nil {
			return nil, fmt.Errorf("tokenizer_class: want a string, got %s", v)
		}
	}
	if err := c.setChatTemplate(raw["chat_template"], "chat_template"); err != nil {
		return nil, err
	}
	return c, nil
}

// setAddedTokensDecoder reads added_tokens_decoder: an object from ids
// (as strings) to added tokens ({"content", "lstrip", "rstrip",
// "single_word", "normalized", "special"}), kept in the order of their ids.
func (c *Config) setAddedTokensDecoder(v json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		return fmt.Errorf("added_tokens_decoder: want an object from ids to tokens, got %.60s", v)
	}
	for key, raw := range m {
		id, err := strconv.ParseInt(key, 10, 32)
		if err != nil || id < 0 {
			return fmt.Errorf("added_tokens_decoder: %q is not a token id", key)
		}
		var tk AddedToken
		if err := json.Unmarshal(raw, &tk); err != nil || tk.Content == "" {
			return fmt.Errorf("added_tokens_decoder.%s: want a token object with content, got %.60s", key, raw)
		}
		tk.ID = int32(id)
		c.AddedTokensDecoder = append(c.AddedTokensDecoder, tk)
	}
	slices.SortFunc(c.AddedTokensDecoder, func(a, b AddedToken) int { return cmp.Compare(a.ID, b.ID) })
	return nil
}

// setChatTemplate reads a chat template as a string or as a list of
// {"name", "template"} objects, whose "default" entry is the default.
func (c *Config) setChatTemplate(v json.RawMessage, key string) error {
	if isNull(v) {
		return nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		c.ChatTemplate = s
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(v, &list); err != nil {
		return fmt.Errorf("%s: want a string or a list of {name, template}, got %.60s", key, v)
	}
	c.ChatTemplates = make(map[string]string, len(list))
	for _, e := range list {
		c.ChatTemplates[e.Name] = e.Template
	}
	c.ChatTemplate = c.ChatTemplates["default"]
	return nil
}

// LoadConfig reads a tokenizer_config.json file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Pretrained is a tokenizer with its configuration, as a checkpoint folder
// holds them.
type Pretrained struct {
	*Tokenizer
	Config *Config
	// BOS and EOS are the ids of the configured tokens, -1 if none.
	BOS, EOS int32
}

// Load reads a checkpoint folder: tokenizer.json, and tokenizer_config.json
// if present. A chat template in chat_template.jinja or chat_template.json
// is used where tokenizer_config.json has none.
//
// Load encodes as transformers' AutoTokenizer does, which for two classes
// differs from tokenizer.json read alone (LoadFile): where tokenizer_class
// is LlamaTokenizer (Llama 2, Mistral and their kin), transformers replaces
// the file's normalizer and decoder by a Metaspace pre-tokenizer and a
// decoder built from the legacy and add_prefix_space options; where it is
// XLMRobertaTokenizer (XLM-R, bge-m3, multilingual-e5), transformers 5
// builds the whole pipeline anew from the file's pieces and charsmap
// (xlmRobertaClass). Load does the same. The two differ after special
// tokens, on leading spaces and, for XLM-R, on runs of whitespace.
func Load(dir string) (*Pretrained, error) {
	t, err := LoadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cpath := filepath.Join(dir, "tokenizer_config.json")
	c := &Config{}
	if cc, err := LoadConfig(cpath); err == nil {
		c = cc
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if c.ChatTemplate != "" || c.ChatTemplates != nil {
		c.ChatTemplateSource = cpath
	} else {
		if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			c.ChatTemplate = string(b)
			c.ChatTemplateSource = filepath.Join(dir, "chat_template.jinja")
		} else if b, err := os.ReadFile(filepath.Join(dir, "chat_template.json")); err == nil {
			c.ChatTemplateSource = filepath.Join(dir, "chat_template.json")
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(b, &raw); err != nil {
				return nil, fmt.Errorf("%s: %v", filepath.Join(dir, "chat_template.json"), err)
			}
			if err := c.setChatTemplate(raw["chat_template"], "chat_template.json: chat_template"); err != nil {
				return nil, err
			}
		}
	}
	p, err := NewPretrained(t, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cpath, err)
	}
	return p, nil
}

// NewPretrained pairs a tokenizer with its configuration, as Load does for
// the files of a folder: the tokenizer class's pipeline (LlamaTokenizer's,
// XLMRobertaTokenizer's) and the ids of the bos and eos tokens.
func NewPretrained(t *Tokenizer, c *Config) (*Pretrained, error) {
	if c == nil {
		c = &Config{}
	}
	p := &Pretrained{Tokenizer: t, Config: c, BOS: -1, EOS: -1}
	switch c.TokenizerClass {
	case "LlamaTokenizer", "LlamaTokenizerFast":
		p.Tokenizer = t.llamaClass(c)
		t = p.Tokenizer
	case "XLMRobertaTokenizer", "XLMRobertaTokenizerFast":
		u, err := t.xlmRobertaClass(c)
		if err != nil {
			return nil, err
		}
		p.Tokenizer, t = u, u
	}
	for _, x := range []struct {
		tok string
		id  *int32
		key string
	}{{c.BOSToken, &p.BOS, "bos_token"}, {c.EOSToken, &p.EOS, "eos_token"}} {
		if x.tok == "" {
			continue
		}
		id, ok := t.TokenToID(x.tok)
		if !ok {
			return nil, fmt.Errorf("%s %q is not a token of tokenizer.json", x.key, x.tok)
		}
		*x.id = id
	}
	return p, nil
}
