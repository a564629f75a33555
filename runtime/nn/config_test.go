package nn

import (
	"encoding/json"
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
	if v := Required[int](r, "hidden_size"); v != 32 {
		t.Errorf("text_config's hidden_size wins: got %d", v)
	}
	if v := Required[int](r, "inner"); v != 7 {
		t.Errorf("inner %d", v)
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
	for in, want := range map[string]string{
		`{"quantization": {"bits": 4}}`:                                    "quantization: group_size: missing (required)",
		`{"quantization": {"group_size": 64, "bits": 4, "mode": "mxfp4"}}`: `quantization: mode "mxfp4" is not supported (affine only)`,
		`{"quantization": {"group_size": 48, "bits": 4}}`:                  "quantization: group size 48 is not supported (want 32, 64 or 128)",
		`{"quantization": {"group_size": 64, "bits": 4, "x": 3}}`:          "quantization.x: want true, false or an object, got 3",
		`{"quantization_config": {"quant_method": "awq"}}`:                 `quantization_config: checkpoints quantized with "awq" are not supported; only mlx's own quantization block is`,
	} {
		if _, err := ParseQuantization([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("%s: %v; want %s", in, err, want)
		}
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
