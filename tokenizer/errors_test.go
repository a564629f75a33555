package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tiny is a small byte-level tokenizer.json; the tests below break one
// part of it at a time.
const tiny = `{
  "added_tokens": [{"id": 5, "content": "<eos>", "special": true, "normalized": false}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
  "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "<eos>"}}],
                     "pair": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "<eos>", "type_id": 1}}],
                     "special_tokens": {"<eos>": {"id": "<eos>", "ids": [5]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4}, "merges": ["a b", "Ġ ab"]}
}`

func TestTinyTokenizer(t *testing.T) {
	tk, err := Parse([]byte(tiny))
	if err != nil {
		t.Fatal(err)
	}
	got := tk.Encode("ab ab<eos>", true)
	want := []int32{2, 4, 5, 5}
	if !equalIDs(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if s := tk.Decode(got, true); s != "ab ab" {
		t.Errorf("Decode = %q", s)
	}
	if tk.VocabSize() != 6 || !tk.IsSpecial(5) || tk.IsSpecial(2) {
		t.Errorf("VocabSize %d, IsSpecial(5) %v, IsSpecial(2) %v", tk.VocabSize(), tk.IsSpecial(5), tk.IsSpecial(2))
	}
	// Ids no token has are left out, as the reference does.
	if s := tk.Decode([]int32{2, 99, -1, 2}, false); s != "abab" {
		t.Errorf("Decode with unknown ids = %q", s)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"not JSON", tiny, tiny[:40], "not a tokenizer.json"},
		{"no model", `"model": {`, `"modelx": {`, "model is missing"},
		{"other model", `"type": "BPE"`, `"type": "WordLevel"`, `model.type "WordLevel" is not supported (BPE, WordPiece and Unigram are)`},
		{"dropout", `"type": "BPE",`, `"type": "BPE", "dropout": 0.1,`, "model.dropout"},
		{"merge token", `"a b"`, `"a c"`, `model.merges[0]: "c"`},
		{"merged token", `"Ġ ab"`, `"b Ġ"`, `model.merges[1]: the merged token "bĠ"`},
		{"merge form", `"a b"`, `"a b c"`, `model.merges[0]`},
		{"unk", `"type": "BPE",`, `"type": "BPE", "unk_token": "<unk>",`, `model.unk_token "<unk>"`},
		{"normalizer", `{"type": "NFC"}`, `{"type": "Nmt"}`, `normalizer: normalizer type "Nmt"`},
		{"pre-tokenizer", `{"type": "ByteLevel", "add_prefix_space": false}`,
			`{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?<"}, "behavior": "Isolated"}]}`,
			"pre_tokenizer.pretokenizers[0].pattern: regex"},
		{"behavior", `{"type": "ByteLevel", "add_prefix_space": false}`,
			`{"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"}`, `pre_tokenizer.behavior: split behavior "Sideways"`},
		{"decoder", `"decoder": {"type": "ByteLevel"}`, `"decoder": {"type": "CTC"}`, `decoder: decoder type "CTC"`},
		{"template", `"ids": [5]}}`, `"ids": [5]}}, "x": 1`, ""},
		{"template token", `{"SpecialToken": {"id": "<eos>"}}`, `{"SpecialToken": {"id": "<bos>"}}`, `post_processor.single[1]: special token "<bos>"`},
		{"pair template token", `{"SpecialToken": {"id": "<eos>", "type_id": 1}}`, `{"SpecialToken": {"id": "<bos>", "type_id": 1}}`,
			`post_processor.pair[2]: special token "<bos>" is not in special_tokens`},
		{"no pair template", `"pair": [`, `"pairs": [`,
			`post_processor.pair is missing (TemplateProcessing needs the pair template as well as the single one)`},
		{"B in the single template", `"single": [{"Sequence": {"id": "A"}}`, `"single": [{"Sequence": {"id": "B"}}`,
			`post_processor.single[0]: the single template has one sequence, A; it cannot use B`},
		{"sequence neither A nor B", `{"Sequence": {"id": "B", "type_id": 1}}`, `{"Sequence": {"id": "C", "type_id": 1}}`,
			`post_processor.pair[1]: sequence "C" is neither A nor B`},
		{"negative type id", `{"Sequence": {"id": "B", "type_id": 1}}`, `{"Sequence": {"id": "B", "type_id": -1}}`,
			`post_processor.pair[1].Sequence.type_id: -1 is not a type id (0 or more)`},
		{"added id", `"id": 5,`, `"id": -5,`, "added_tokens[0]: id -5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(tiny, c.old, c.new, 1)
			if src == tiny && c.old != tiny {
				t.Fatalf("the test does not change the file (%q not found)", c.old)
			}
			_, err := Parse([]byte(src))
			if c.want == "" {
				if err != nil {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "tokenizer.json")) {
		t.Errorf("Load of an empty folder: %v", err)
	}
	bad := strings.Replace(tiny, `"type": "BPE"`, `"type": "WordLevel"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json: model.type") {
		t.Errorf("Load of a WordLevel tokenizer: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tiny), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(cfg, []byte(`{"eos_token": "<end>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `tokenizer_config.json: eos_token "<end>" is not a token`) {
		t.Errorf("Load with an unknown eos_token: %v", err)
	}
	if err := os.WriteFile(cfg, []byte(`{"eos_token": "<eos>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ messages }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.EOS != 5 || p.BOS != -1 || p.Config.ChatTemplate != "{{ messages }}" {
		t.Errorf("EOS %d BOS %d template %q", p.EOS, p.BOS, p.Config.ChatTemplate)
	}
}

// TestXLMRobertaClassErrors: a folder naming XLMRobertaTokenizer whose
// special token the vocabulary lacks, or whose Unigram vocabulary has no id
// 3 for the class's unknown piece, is refused naming the key; one whose
// model is not Unigram keeps its file's pipeline.
func TestXLMRobertaClassErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unigram := `{"version": "1.0", "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["▁a", -1.0], ["b", -2.0]]}}`
	for _, c := range []struct{ tokenizer, config, want string }{
		{unigram, `{"tokenizer_class": "XLMRobertaTokenizer"}`,
			"tokenizer_config.json: tokenizer_class XLMRobertaTokenizer: the Unigram vocab holds 3 pieces, and the class reads id 3 as the unknown one"},
		{strings.Replace(unigram, `["b", -2.0]]`, `["b", -2.0], ["<s>", 0.0], ["</s>", 0.0], ["<pad>", 0.0]]`, 1),
			`{"tokenizer_class": "XLMRobertaTokenizerFast", "unk_token": "<unk>", "mask_token": "<msk>"}`,
			`tokenizer_config.json: mask_token "<msk>" is not a token of tokenizer.json`},
	} {
		write("tokenizer.json", c.tokenizer)
		write("tokenizer_config.json", c.config)
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load: %v, want an error holding %q", err, c.want)
		}
	}
	write("tokenizer.json", tiny)
	write("tokenizer_config.json", `{"tokenizer_class": "XLMRobertaTokenizer"}`)
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := LoadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Encode("hello world", true), plain.Encode("hello world", true); !slices.Equal(got, want) {
		t.Errorf("a BPE file under XLMRobertaTokenizer: %v, the file alone %v", got, want)
	}
}
