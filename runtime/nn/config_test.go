package nn

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestConfigReader(t *testing.T) {
	r, err := NewConfigReader([]byte(`{
		"model_type": "llama",
		"hidden_size": 64, "ratio": 0.5, "flag": true, "name": "x",
		"layers": [1, 0, 1], "types": ["a", "b"], "nothing": null,
		"half": 2.5, "word": "no", "rope_parameters": {"rope_theta": 5.0},
		"text_config": {"hidden_size": 32, "inner": 7}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.ModelType() != "llama" {
		t.Errorf("model_type %q", r.ModelType())
	}
	if v := Required[int](r, "hidden_size"); v != 64 {
		t.Errorf("a plain config's text_config is not read: hidden_size %d", v)
	}
	if _, ok := Optional[int](r, "inner"); ok {
		t.Error("a key of text_config reads as a top-level one")
	}
	if v := Default[float64](r, "ratio", 1); v != 0.5 {
		t.Errorf("ratio %v", v)
	}
	if v := Default[float64](r, "nothing", 3); v != 3 {
		t.Errorf("null reads as absent: got %v", v)
	}
	if v := Required[float64](r, "theta", "rope_parameters.rope_theta"); v != 5 {
		t.Errorf("fallback: got %v", v)
	}
	if v, ok := Optional[[]int](r, "layers"); !ok || len(v) != 3 || v[1] != 0 {
		t.Errorf("layers %v %v", v, ok)
	}
	if r.Err() != nil {
		t.Fatalf("unexpected errors: %v", r.Err())
	}
	Required[int](r, "missing")
	Required[int](r, "half")
	Required[bool](r, "word")
	Required[[]string](r, "layers")
	Min(r, "ratio", 0.5, 1.0)
	r.Len("types", 2, 3, "num_hidden_layers")
	r.Check(false, "flag", "must be false")
	want := "missing: missing (required)\n" +
		"half: want an integer, got 2.5\n" +
		`word: want true or false, got "no"` + "\n" +
		"layers: want a list of strings, got [1, 0, 1]\n" +
		"ratio: must be at least 1, got 0.5\n" +
		"types: has 2 entries, want 3 (num_hidden_layers)\n" +
		"flag: must be false"
	if err := r.Err(); err == nil || err.Error() != want {
		t.Errorf("errors:\n%v\nwant:\n%s", err, want)
	}
	if _, err := NewConfigReader([]byte(`[1]`)); err == nil {
		t.Error("a list is no config")
	}
	r, _ = NewConfigReader([]byte(`{"hidden_size": 1}`))
	if err := r.Err(); err == nil || err.Error() != "model_type: missing (required)" {
		t.Errorf("no model_type: %v", err)
	}
}

func TestParseQuantization(t *testing.T) {
	q, err := ParseQuantization([]byte(`{"quantization": {"group_size": 64, "bits": 4,
		"lm_head": {"bits": 8}, "model.embed_tokens": false, "model.layers.0.mlp.down_proj": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if q.Default != (QuantParams{GroupSize: 64, Bits: 4, Mode: "affine"}) {
		t.Errorf("default %+v", q.Default)
	}
	if m := q.Modules["lm_head"]; m.Params == nil || *m.Params != (QuantParams{GroupSize: 64, Bits: 8, Mode: "affine"}) {
		t.Errorf("lm_head %+v", m)
	}
	if !q.Modules["model.embed_tokens"].Off || q.Modules["model.layers.0.mlp.down_proj"].Off {
		t.Errorf("modules %+v", q.Modules)
	}
	if q, err := ParseQuantization([]byte(`{"quantization": {"group_size": 32, "bits": 4, "m": {"parts": 3, "part_groups": 2}, "n": {"parts": 2}}}`)); err != nil ||
		q.Modules["m"] != (ModuleQuant{Parts: 3, PartGroups: 2}) || q.Modules["n"] != (ModuleQuant{Parts: 2, PartGroups: 1}) {
		t.Errorf("modules held as parts: %+v, %v", q, err)
	}
	for in, want := range map[string]string{
		`{"quantization": {"bits": 4}}`:                                                                         "quantization: group_size: missing (required)",
		`{"quantization": {"group_size": 64, "bits": 4, "mode": "mxfp4"}}`:                                      `quantization: mode mxfp4 is 4 bits in groups of 32, not 4 bits in groups of 64`,
		`{"quantization": {"group_size": 32, "bits": 4, "mode": "nvfp4"}}`:                                      `quantization: mode "nvfp4" is not supported (affine, mxfp4, or one of llama.cpp's block types: gguf_q4_k and the like)`,
		`{"quantization": {"group_size": 48, "bits": 4}}`:                                                       "quantization: group size 48 is not supported (want 32, 64 or 128)",
		`{"quantization": {"group_size": 64, "bits": 4, "x": 3}}`:                                               "quantization.x: want true, false or an object, got 3",
		`{"quantization": {"group_size": 64, "bits": 4, "m": {"parts": 1}}}`:                                    "quantization.m: parts: want a whole number of at least 2, got 1",
		`{"quantization": {"group_size": 64, "bits": 4, "m": {"parts": 2, "part_groups": 0}}}`:                  "quantization.m: part_groups: want a whole number of at least 1, got 0",
		`{"quantization": {"group_size": 64, "bits": 4, "m": {"parts": 2, "bits": 8}}}`:                         "quantization.m: bits: a module held as parts takes parts and part_groups alone",
		`{"quantization_config": {"quant_method": "awq"}}`:                                                      `quantization_config: checkpoints quantized with "awq" are not supported; only mlx's own quantization block, quant_method mxfp4, fp8 and compressed-tensors' pack-quantized are`,
		`{"quantization_config": {"quant_method": "fp8", "scale_fmt": "ue8m0", "weight_block_size": [32, 32]}}`: "quantization_config: FP8 with power-of-two (ue8m0) scales is MLX's mxfp8, which archgen does not run",
		`{"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized"}}`:          `quantization_config.format: compressed-tensors in the format "float-quantized" is not supported; only pack-quantized (4-bit integers in groups of 32) is`,
	} {
		if _, err := ParseQuantization([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("%s: %v; want %s", in, err, want)
		}
	}
	// gpt-oss's published quantization_config: mxfp4 where the checkpoint has scales
	if q, err := ParseQuantization([]byte(`{"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}}`)); err != nil ||
		q.Default != (QuantParams{GroupSize: 32, Bits: 4, Mode: "mxfp4"}) || len(q.Modules) != 0 {
		t.Errorf("mxfp4 quantization_config: %+v %v", q, err)
	}
	if q, err := ParseQuantization([]byte(`{"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4", "model.layers.0.mlp.router": {"group_size": 64, "bits": 8}}}`)); err != nil ||
		q.Default != (QuantParams{GroupSize: 32, Bits: 4, Mode: "mxfp4"}) || *q.Modules["model.layers.0.mlp.router"].Params != (QuantParams{GroupSize: 64, Bits: 8, Mode: "affine"}) {
		t.Errorf("mxfp4 block: %+v %v", q, err)
	}
	// DeepSeek's FP8: no quantized modules (the codes are read as floats)
	if q, err := ParseQuantization([]byte(`{"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}`)); q != nil || err != nil {
		t.Errorf("fp8 quantization_config: %+v %v", q, err)
	}
	// compressed-tensors' pack-quantized: 4-bit affine in groups of 32, packed
	if q, err := ParseQuantization([]byte(`{"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"}}`)); err != nil ||
		q.Default != (QuantParams{GroupSize: 32, Bits: 4, Mode: "affine"}) || !q.Packed {
		t.Errorf("pack-quantized quantization_config: %+v %v", q, err)
	}
	if q, err := ParseQuantization([]byte(`{"model_type": "llama"}`)); q != nil || err != nil {
		t.Errorf("no block: %v %v", q, err)
	}
}

func TestRopeScalingJSON(t *testing.T) {
	raw := `{"rope_type":"llama3","factor":8}`
	r, err := ParseRopeScaling(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r)
	if string(out) != raw {
		t.Errorf("marshals as %s, want %s", out, raw)
	}
	if r.Kind() != "llama3" || *r.Factor != 8 {
		t.Errorf("%+v", r)
	}
}

// TestWrapperUnwrap: a wrapper's config becomes its text model's: the
// section's keys, top-level keys that win, defaults, values set whatever
// the section holds, the quantization, and the model_type of the
// architecture that runs it.
func TestWrapperUnwrap(t *testing.T) {
	w := &Wrapper{
		Section:  "text_config",
		TopWins:  []string{"vocab_size"},
		Defaults: map[string]any{"num_attention_heads": 8},
		Set:      map[string]any{"tie_word_embeddings": false},
		Runs:     "llama",
		Dispatch: map[string]string{"ministral3": "ministral3"},
	}
	arch, text, err := w.Unwrap([]byte(`{"model_type": "wrap", "vocab_size": 50, "hidden_size": 1,
		"quantization": {"bits": 4, "group_size": 64},
		"text_config": {"model_type": "mistral", "hidden_size": 64, "vocab_size": 10, "num_attention_heads": 4, "tie_word_embeddings": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(text, &got)
	want := map[string]any{"model_type": "llama", "hidden_size": 64.0, "vocab_size": 50.0, "num_attention_heads": 4.0,
		"tie_word_embeddings": false, "quantization": map[string]any{"bits": 4.0, "group_size": 64.0}}
	if arch != "llama" || !reflect.DeepEqual(got, want) {
		t.Errorf("unwrapped to %s %v, want llama %v", arch, got, want)
	}
	arch, _, _ = w.Unwrap([]byte(`{"model_type": "wrap", "text_config": {"model_type": "ministral3"}}`))
	if arch != "ministral3" {
		t.Errorf("dispatch on text_config.model_type: %s", arch)
	}
	for data, msg := range map[string]string{
		`{"model_type": "wrap"}`:                     "text_config: missing (required): the text model's config",
		`{"model_type": "wrap", "text_config": [1]}`: "text_config: want an object, got [1]",
		`[]`: "not a JSON object",
	} {
		if _, _, err := w.Unwrap([]byte(data)); err == nil || err.Error() != msg {
			t.Errorf("%s: error %v, want %s", data, err, msg)
		}
	}
	w.SectionOptional = true
	_, text, err = w.Unwrap([]byte(`{"model_type": "wrap", "hidden_size": 8}`))
	if err != nil || string(text) != `{"hidden_size":8,"model_type":"llama","num_attention_heads":8,"tie_word_embeddings":false}` {
		t.Errorf("a config without its optional section: %s, %v", text, err)
	}
	w.Prefixes = []Prefix{{"model.language_model.", "model."}, {"language_model.", ""}}
	w.Drop = []string{"vision_tower", "multi_modal_projector"}
	for in, out := range map[string]string{
		"model.language_model.layers.0.mlp.up_proj.weight": "model.layers.0.mlp.up_proj.weight",
		"language_model.model.norm.weight":                 "model.norm.weight",
		"language_model.lm_head.weight":                    "lm_head.weight",
		"lm_head.weight":                                   "lm_head.weight",
		"model.vision_tower.patch_conv.weight":             "",
		"multi_modal_projector.linear_1.weight":            "",
	} {
		got, keep := w.rename(in)
		if keep != (out != "") || got != out && keep {
			t.Errorf("%s: %q %v, want %q", in, got, keep, out)
		}
	}
}

// TestWrapperRefuse: a section model_type the wrapper refuses is an error
// naming the section's model_type, whether or not the wrapper dispatches
// others; the ones it does not refuse still run on Runs or their dispatch.
func TestWrapperRefuse(t *testing.T) {
	w := &Wrapper{Section: "text_config", Runs: "llama", Dispatch: map[string]string{"x": "qwen3"}, Refuse: []string{"ministral3", "mistral4"}}
	for _, mt := range []string{"ministral3", "mistral4"} {
		_, _, err := w.Unwrap([]byte(`{"model_type": "w", "text_config": {"model_type": "` + mt + `", "hidden_size": 8}}`))
		want := `text_config.model_type: "` + mt + `": this checkpoint's text model runs on the ` + mt + ` architecture, which archgen does not support`
		if err == nil || err.Error() != want {
			t.Errorf("%s: error %v, want %s", mt, err, want)
		}
	}
	for mt, want := range map[string]string{"mistral": "llama", "x": "qwen3", "": "llama"} {
		arch, _, err := w.Unwrap([]byte(`{"model_type": "w", "text_config": {"model_type": "` + mt + `"}}`))
		if err != nil || arch != want {
			t.Errorf("%q: %s, %v; want %s", mt, arch, err, want)
		}
	}
	w.Refuse = nil
	if arch, _, err := w.Unwrap([]byte(`{"model_type": "w", "text_config": {"model_type": "ministral3"}}`)); err != nil || arch != "llama" {
		t.Errorf("without refuse: %s, %v", arch, err)
	}
}

// TestConfigPythonNumbers: the bare Infinity, -Infinity and NaN Python's
// json module writes read as those numbers where a float is wanted; inside
// strings they stay as they are, and an integer key refuses them.
func TestConfigPythonNumbers(t *testing.T) {
	r, err := NewConfigReader([]byte(`{"model_type": "x", "limit": [0.0, Infinity], "low": -Infinity,
		"odd": NaN, "note": "NaN and Infinity \" Infinity", "n": Infinity,
		"tagged": [0.001, {"__float__": "Infinity"}], "other": {"__float__": "Inf"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if v := Required[[]float64](r, "limit"); len(v) != 2 || v[0] != 0 || !math.IsInf(v[1], 1) {
		t.Errorf("limit %v", v)
	}
	if v := Required[float64](r, "low"); !math.IsInf(v, -1) {
		t.Errorf("low %v", v)
	}
	if v := Required[float64](r, "odd"); !math.IsNaN(v) {
		t.Errorf("odd %v", v)
	}
	if v := Required[string](r, "note"); v != `NaN and Infinity " Infinity` {
		t.Errorf("note %q", v)
	}
	if v := Required[[]float64](r, "tagged"); len(v) != 2 || v[0] != 0.001 || !math.IsInf(v[1], 1) {
		t.Errorf("tagged %v", v)
	}
	Required[int](r, "n")
	Required[float64](r, "other")
	if err := r.Err(); err == nil || err.Error() != `n: want an integer, got "Infinity"`+"\n"+`other: want a number, got {"__float__": "Inf"}` {
		t.Errorf("errors: %v", err)
	}
}
