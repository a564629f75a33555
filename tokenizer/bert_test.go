package tokenizer

import (
	"strings"
	"testing"
)

// tinyBert is a small BERT tokenizer.json (BertNormalizer,
// BertPreTokenizer, WordPiece model and decoder, a pair template), with
// truncation and padding settings that Encode ignores; the tests below
// break one part of it at a time. Its expected ids come from the
// tokenizers library (after no_truncation and no_padding).
const tinyBert = `{
  "version": "1.0",
  "truncation": {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0},
  "padding": {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
  "added_tokens": [
    {"id": 0, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 3, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
             {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
  "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 10,
    "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "un": 4, "##aff": 5, "##able": 6, "cafe": 7, ".": 8, "北": 9, "'": 10, "t": 11, "don": 12, "a": 13}}
}`

func TestTinyBert(t *testing.T) {
	tk, err := Parse([]byte(tinyBert))
	if err != nil {
		t.Fatal(err)
	}
	// Truncation to 4 and padding to 16 are not applied. The 11-letter
	// word passes max_input_chars_per_word; "x" and "unaffx" cannot be
	// spelled; U+0000 is dropped, which leaves nothing of its word.
	got := tk.Encode("Unaffable CAF\u00c9. \u5317x don't aaaaaaaaaaa unaffx \x00", true)
	want := []int32{2, 4, 5, 6, 7, 8, 9, 1, 12, 10, 11, 1, 1, 3}
	if !equalIDs(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if s := tk.Decode(got, true); s != "unaffable cafe. \u5317 don ' t" {
		t.Errorf("Decode = %q", s)
	}
	if s := tk.Decode(got, false); s != "[CLS] unaffable cafe. \u5317 [UNK] don ' t [UNK] [UNK] [SEP]" {
		t.Errorf("Decode with special tokens = %q", s)
	}
	ids, types := tk.EncodePair("a", "cafe", true)
	if !equalIDs(ids, []int32{2, 13, 3, 7, 3}) || !equalIDs(types, []int32{0, 0, 0, 1, 1}) {
		t.Errorf("EncodePair = %v %v", ids, types)
	}
	ids, types = tk.EncodePair("a", "cafe", false)
	if !equalIDs(ids, []int32{13, 7}) || !equalIDs(types, []int32{0, 1}) {
		t.Errorf("EncodePair without special tokens = %v %v", ids, types)
	}
	ids, types = tk.EncodeWithTypes("a cafe", true)
	if !equalIDs(ids, []int32{2, 13, 7, 3}) || !equalIDs(types, []int32{0, 0, 0, 0}) {
		t.Errorf("EncodeWithTypes = %v %v", ids, types)
	}
	// The special tokens the template adds are not shared with callers.
	ids, _ = tk.EncodeWithTypes("", true)
	ids[0] = 99
	if again := tk.Encode("", true); !equalIDs(again, []int32{2, 3}) {
		t.Errorf("Encode after a caller changed a result = %v", again)
	}
}

func TestParseBertErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"WordPiece without vocab", `"vocab": {`, `"vocabulary": {`, "model.vocab is missing"},
		{"vocab not an object", `"vocab": {"[PAD]": 0,`, `"vocab": [0], "x": {"[PAD]": 0,`, "model.vocab: want an object of token ids, got [0]"},
		{"vocab id not a number", `"a": 13`, `"a": "13"`, `model.vocab: token "a": want an id from 0 to 2147483647, got "13"`},
		{"negative vocab id", `"a": 13`, `"a": -13`, `model.vocab: token "a": want an id from 0 to 2147483647, got -13`},
		{"unk_token not in vocab", `"unk_token": "[UNK]"`, `"unk_token": "<unk>"`, `model.unk_token "<unk>" is not in model.vocab`},
		{"no unk_token", `"unk_token": "[UNK]", `, ``, "model.unk_token is missing"},
		{"unk_token not a string", `"unk_token": "[UNK]"`, `"unk_token": 1`, "model.unk_token: want a string, got 1"},
		{"no continuing_subword_prefix", `"continuing_subword_prefix": "##", `, ``, "model.continuing_subword_prefix is missing"},
		{"no max_input_chars_per_word", `"max_input_chars_per_word": 10,`, ``, "model.max_input_chars_per_word is missing"},
		{"negative max_input_chars_per_word", `"max_input_chars_per_word": 10`, `"max_input_chars_per_word": -1`,
			"model.max_input_chars_per_word: want a non-negative integer, got -1"},
		{"huge max_input_chars_per_word", `"max_input_chars_per_word": 10`, `"max_input_chars_per_word": 123456789012345678901234567890`, ""},
		{"model type not a string", `"type": "WordPiece", "unk`, `"type": 7, "unk`, "model.type: want a string, got 7"},
		{"model without a type", `"type": "WordPiece", "unk`, `"unk`, ""},
		{"BertNormalizer without lowercase", `, "lowercase": true}`, `}`, "normalizer.lowercase is missing"},
		{"clean_text not a bool", `"clean_text": true`, `"clean_text": "yes"`, `normalizer.clean_text: want true or false, got "yes"`},
		{"strip_accents not a bool", `"strip_accents": null`, `"strip_accents": "no"`, `normalizer.strip_accents: want true, false or null, got "no"`},
		{"LlamaCppWordPiece without lowercase", `{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}`,
			`{"type": "LlamaCppWordPiece", "strip_accents": true}`, "normalizer.lowercase is missing"},
		{"LlamaCppWordPiece strip_accents not a bool", `{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}`,
			`{"type": "LlamaCppWordPiece", "strip_accents": "no", "lowercase": true}`, `normalizer.strip_accents: want true or false, got "no"`},
		{"WordPiece decoder without prefix", `"prefix": "##", `, ``, "decoder.prefix is missing"},
		{"cleanup not a bool", `"cleanup": true`, `"cleanup": 1`, "decoder.cleanup: want true or false, got 1"},
		{"truncation and padding of any form", `"truncation": {`, `"truncation": 5, "x": {`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(tinyBert, c.old, c.new, 1)
			if src == tinyBert {
				t.Fatalf("the test does not change the file (%q not found)", c.old)
			}
			_, err := Parse([]byte(src))
			if c.want == "" {
				if err != nil {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			if err == nil || err.Error() != c.want {
				t.Errorf("got error %v, want %q", err, c.want)
			}
		})
	}
}

// TestWordPieceDecoder checks the WordPiece decoder on tokens BERT's
// vocabulary does not have (the contractions of its cleanup, tokens with
// spaces), so the reference texts cannot reach them. The expected strings
// are what the tokenizers library's decoders.WordPiece("##", cleanup=True)
// gives.
func TestWordPieceDecoder(t *testing.T) {
	d := wordPieceDec{prefix: "##", cleanup: true}
	for _, c := range []struct {
		toks []string
		want string
	}{
		{[]string{"I", "do", "not", "know"}, "I do not know"},
		{[]string{"it", "n't", "ok"}, "itn't ok"},
		{[]string{"I", "'m", "here", ".", "?", "!", ","}, "I'm here.?!,"},
		{[]string{"a", "' b", "'s", "'ve", "'re"}, "a'b's've're"},
		{[]string{"x", "##y", "z", "do not", "##'s"}, "xy z don't's"},
		{[]string{"do not", "x"}, "do not x"},
		{[]string{" ?a .b"}, "?a.b"},
		{[]string{"a", " , ", " ' ", "c"}, "a ,  ' c"},
	} {
		if got := strings.Join(d.decode(c.toks, &decodeState{}), ""); got != c.want {
			t.Errorf("decode(%q) = %q, want %q", c.toks, got, c.want)
		}
	}
}
