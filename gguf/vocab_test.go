package gguf

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestVocabularies: each vocabulary kind archgen builds a tokenizer from
// tokenizes every test text as llama.cpp does on the same file
// (llama-logits --tokenize), without and with the tokens the vocabulary
// adds, control tokens in the text read as such: a SentencePiece
// vocabulary (tokenizer.ggml.model "llama", as Llama 2's, Mistral's and
// Gemma's files carry) with and without add_space_prefix (pieces merged by
// score, bytes falling back to the byte tokens), and a byte-level BPE one
// under each pre-tokenizer type make_vocab_cases.py lists, and a WordPiece
// one ("bert", in the converter's phantom-space spelling) with llama.cpp's
// default normalizer (lowercased, accents dropped), cased, with accents
// kept, and with its special tokens at other ids. Decoding the ids of a
// text without control tokens gives the text back (but WordPiece's).
func TestVocabularies(t *testing.T) {
	tool := filepath.Join(llamaTools, "llama-logits")
	if _, err := os.Stat(tool); err != nil {
		t.Fatalf("%v: run `make setup-llama-tools`", err)
	}
	dir := t.TempDir()
	run(t, "testdata/make_vocab_cases.py", dir, llamaTools)
	var texts, names []string
	for file, v := range map[string]*[]string{"texts.json": &texts, "files.json": &names} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	if len(names) < 3 {
		t.Fatalf("%d vocabulary files", len(names))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".gguf")
			hdr, err := ReadHeader(path)
			if err != nil {
				t.Fatal(err)
			}
			tj, tc, err := tokenizerFiles(metadata{path: path, raw: hdr.Values}, map[string]any{"max_position_embeddings": 512})
			if err != nil {
				t.Fatal(err)
			}
			m := &Model{Path: path, TokenizerJSON: tj, TokenizerConfig: tc}
			tok, err := m.Tokenizer()
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, "ids-"+name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
			if len(lines) != 2*len(texts) {
				t.Fatalf("%d lines of llama.cpp's ids for %d texts", len(lines), len(texts))
			}
			for i, text := range texts {
				for j, add := range []bool{false, true} {
					want := lines[2*i+j]
					got := join(tok.Encode(text, add))
					if got != want {
						t.Errorf("%q (specials added: %v): ids %s, llama.cpp's %s", text, add, got, want)
					}
				}
				// a text without control tokens comes back whole (after one,
				// the piece space put before the text that follows stays)
				// (not a WordPiece vocabulary's, which lowercases and drops
				// accents and what it cannot spell)
				if back := tok.Decode(tok.Encode(text, false), false); back != text && !strings.Contains(text, "<|") && !strings.HasPrefix(name, "wpm-") {
					t.Errorf("%q decodes back as %q", text, back)
				}
			}
		})
	}
}

// vocabFile makes make_vocab_cases.py's files and returns one's path with
// a copy of its metadata values, for a test to change.
func vocabFile(t *testing.T, name string) (string, map[string]Value) {
	t.Helper()
	dir := t.TempDir()
	run(t, "testdata/make_vocab_cases.py", dir, llamaTools)
	path := filepath.Join(dir, name)
	hdr, err := ReadHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, maps.Clone(hdr.Values)
}

// vocabFault is a change to a vocabulary file's metadata and the error
// (after the file's path) building its tokenizer then gives.
type vocabFault struct {
	name   string
	change func(v map[string]Value)
	want   string
}

// refusesFaults checks each fault on a copy of values, the metadata of the
// file at path.
func refusesFaults(t *testing.T, path string, values map[string]Value, faults []vocabFault) {
	t.Helper()
	for _, c := range faults {
		t.Run(c.name, func(t *testing.T) {
			v := maps.Clone(values)
			c.change(v)
			_, _, err := tokenizerFiles(metadata{path: path, raw: v}, map[string]any{})
			if want := path + ": " + c.want; err == nil || err.Error() != want {
				t.Fatalf("error %v, want %s", err, want)
			}
		})
	}
}

// TestPieceTokenizerRefuses: what a vocabulary's metadata must hold, by
// name (the SentencePiece file of TestVocabularies, one value changed).
func TestPieceTokenizerRefuses(t *testing.T) {
	path, values := vocabFile(t, "spm-prefix.gguf")
	refusesFaults(t, path, values, []vocabFault{
		{"unknown model", func(v map[string]Value) { v["tokenizer.ggml.model"] = Value{Kind: ValueString, Str: "t5"} },
			`tokenizer.ggml.model "t5" is not supported (byte-level BPE, "gpt2", SentencePiece, "llama", WordPiece, "bert", and Gemma 4's BPE of pieces, "gemma4", are)`},
		{"no scores", func(v map[string]Value) { delete(v, "tokenizer.ggml.scores") },
			"metadata key tokenizer.ggml.scores is missing"},
		{"scores of another length", func(v map[string]Value) {
			sc := v["tokenizer.ggml.scores"]
			sc.Nums = sc.Nums[:10]
			v["tokenizer.ggml.scores"] = sc
		}, fmt.Sprintf("tokenizer.ggml.scores is not a list of %d numbers (one a token)", len(values["tokenizer.ggml.tokens"].Strs))},
	})
}

// TestWordPieceRefuses: a WordPiece vocabulary's special tokens must be
// within it, named by key, or at BERT's ids (the file of TestVocabularies,
// one value changed).
func TestWordPieceRefuses(t *testing.T) {
	path, values := vocabFile(t, "wpm-default.gguf")
	n := len(values["tokenizer.ggml.tokens"].Strs)
	refusesFaults(t, path, values, []vocabFault{
		{"a separator past the vocabulary", func(v map[string]Value) {
			v["tokenizer.ggml.seperator_token_id"] = Value{Kind: ValueNumber, Num: float64(n)}
		}, fmt.Sprintf("tokenizer.ggml.seperator_token_id %d is outside the %d-token vocabulary", n, n)},
		{"a vocabulary too short for BERT's ids", func(v map[string]Value) {
			tok, typ := v["tokenizer.ggml.tokens"], v["tokenizer.ggml.token_type"]
			tok.Strs, typ.Nums = tok.Strs[:50], typ.Nums[:50]
			v["tokenizer.ggml.tokens"], v["tokenizer.ggml.token_type"] = tok, typ
		}, "no tokenizer.ggml.unknown_token_id, and the default 100 is outside the 50-token vocabulary"},
		{"a lowercase flag that is no bool or number", func(v map[string]Value) {
			v["tokenizer.ggml.normalizer.lowercase"] = Value{Kind: ValueString, Str: "yes"}
		}, "metadata key tokenizer.ggml.normalizer.lowercase is not a number"},
	})
}

// TestPoolingType: an embedding file's pooling_type by llama.cpp's numbers;
// one llama.cpp does not have is refused by name.
func TestPoolingType(t *testing.T) {
	path, v := vocabFile(t, "wpm-default.gguf")
	for n, want := range map[float64]string{0: "", 1: "mean", 2: "cls", 3: "last", 4: ""} {
		v["bert.pooling_type"] = Value{Kind: ValueNumber, Num: n}
		got, err := poolingType(metadata{path: path, raw: v}, "bert")
		if err != nil || got != want {
			t.Errorf("pooling_type %v: %q, %v; want %q", n, got, err, want)
		}
	}
	v["bert.pooling_type"] = Value{Kind: ValueNumber, Num: 7}
	_, err := poolingType(metadata{path: path, raw: v}, "bert")
	if want := path + ": bert.pooling_type 7 is not a pooling llama.cpp has (0 none, 1 mean, 2 cls, 3 last, 4 rank)"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestPreTypeRefused: a byte-level vocabulary under a pre-tokenizer type
// without llama.cpp's splits here is refused by name.
func TestPreTypeRefused(t *testing.T) {
	path, v := vocabFile(t, "bpe-gpt-2.gguf")
	v["tokenizer.ggml.pre"] = Value{Kind: ValueString, Str: "viking"}
	_, _, err := tokenizerFiles(metadata{path: path, raw: v}, map[string]any{})
	if want := path + `: tokenizer pre-type "viking" is not supported`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestExtraLayersRefused: a count of trailing blocks the model does not run
// that leaves it no layer is refused by name (a real file's metadata, the
// count added).
func TestExtraLayersRefused(t *testing.T) {
	path, v := vocabFile(t, "bpe-gpt-2.gguf")
	v["llama.nextn_predict_layers"] = Value{Kind: ValueNumber, Num: 1}
	_, err := config(metadata{path: path, raw: v}, "llama", "llama", &nn.GGUF{ExtraLayers: "nextn_predict_layers"}, nil)
	if want := path + ": llama.nextn_predict_layers is 1, of 1 blocks"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestLayerValuesRefused: numbers a layer the metadata holds for a
// descriptor's layer_values must be one a layer (a real file's metadata,
// the key added with too few).
func TestLayerValuesRefused(t *testing.T) {
	path, v := vocabFile(t, "bpe-gpt-2.gguf")
	v["xielu.alpha_n"] = Value{Kind: ValueNumbers, Nums: []float64{0.5}}
	a := &nn.GGUF{Layers: "model.layers", LayerValues: map[string]string{"xielu.alpha_n": "mlp.act_fn.alpha_n"}}
	err := layerValues(metadata{path: path, raw: v}, "llama", a, 2, map[string]*mlx.Array{})
	if want := path + ": metadata key xielu.alpha_n is not a number for each of 2 layers"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

func join(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return strings.Join(parts, " ")
}
