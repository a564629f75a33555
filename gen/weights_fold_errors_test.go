package gen

import (
	"strings"
	"testing"
)

// ssdBase is base with the keys an ssd mixer reads by default, the scan
// beside attention on every layer.
var ssdBase = strings.Replace(strings.Replace(base, "    vocab_size: {type: int, required: true}\n",
	"    vocab_size: {type: int, required: true}\n"+
		"    num_heads: {type: int, required: true, min: 1}\n"+
		"    n_groups: {type: int, required: true, min: 1}\n"+
		"    ssm_state_size: {type: int, required: true, min: 1}\n"+
		"    conv_kernel: {type: int, required: true, min: 1}\n"+
		"    use_conv_bias: {type: bool, required: true}\n"+
		"    use_bias: {type: bool, required: true}\n"+
		"    layer_norm_epsilon: {type: float, required: true}\n"+
		"    time_step_limit: {type: floats, required: true, length: 2}\n"+
		"    multiplier: {type: float, required: true}\n", 1),
	"structure:\n", "structure:\n  mixers:\n    ssd:\n      layers: \"true\"\n      with_attention: true\n", 1)

// TestFoldAndBesideErrors: the bad descriptors of weights.fold and of a
// mixer kind beside attention, each with its exact message.
func TestFoldAndBesideErrors(t *testing.T) {
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(ssdBase)}); err != nil {
		t.Fatalf("ssdBase: %v", err)
	}
	fold := func(body string) string { return ssdBase + "weights:\n  fold:\n" + body }
	for _, c := range []struct{ name, yaml, want string }{
		{"a fold without its condition", fold("    scale:\n      - {suffix: embed_tokens.weight, by: multiplier}\n"),
			"descriptors/a.yaml:34: weights.fold.when_unmoved: missing or not a checkpoint name: the convolution weight whose order tells the checkpoint's form"},
		{"a fold without rules", fold("    when_unmoved: model.layers.0.ssd.conv1d.weight\n"),
			"descriptors/a.yaml:34: weights.fold: no scale or rows rule"},
		{"a scale rule without a suffix", fold("    when_unmoved: model.layers.0.ssd.conv1d.weight\n    scale:\n      - {by: multiplier}\n"),
			"descriptors/a.yaml:36: weights.fold.scale[0].suffix: missing or not the end of a checkpoint name"},
		{"a scale by no number", fold("    when_unmoved: model.layers.0.ssd.conv1d.weight\n    scale:\n      - {suffix: q_proj.weight, by: use_bias}\n"),
			`descriptors/a.yaml:36: weights.fold.scale[0].by: "use_bias" is bool, want float`},
		{"a rows rule without segments", fold("    when_unmoved: model.layers.0.ssd.conv1d.weight\n    rows:\n      - {suffix: in_proj.weight, by: multiplier}\n"),
			"descriptors/a.yaml:36: weights.fold.rows[0].segments: missing: the blocks of rows and their factors"},
		{"beside attention in a parallel block", strings.Replace(ssdBase, "structure:\n", "structure:\n  block: parallel\n", 1),
			"descriptors/a.yaml:24: structure.block: a mixer kind beside attention (with_attention) runs in a block with norms before its sublayers only, not parallel"},
		{"beside attention with scaled residuals", strings.Replace(ssdBase, "structure:\n", "structure:\n  residual_scale: multiplier\n", 1),
			"descriptors/a.yaml:24: structure.residual_scale: a mixer kind beside attention (with_attention) adds to the stream unscaled; a residual scale is not supported with it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(c.yaml)})
			if err == nil {
				t.Fatalf("no error; want %s", c.want)
			}
			if err.Error() != c.want {
				t.Fatalf("error\n%s\nwant\n%s", err, c.want)
			}
		})
	}
}

// TestAutoKeyErrors: "auto" reads as absent only on a derived key.
func TestAutoKeyErrors(t *testing.T) {
	yaml := strings.Replace(base, "    head_dim: {type: int, required: true}\n", "    head_dim: {type: int, required: true, auto: true}\n", 1)
	_, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(yaml)})
	want := `descriptors/a.yaml:10: config.keys.head_dim.auto: "auto" reads as absent, and only derive gives an absent key its value`
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestNullKeyErrors: a value of its own for null belongs to a key with a
// default, and has the key's type.
func TestNullKeyErrors(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"{type: int, required: true, null: 0}", `descriptors/a.yaml:10: config.keys.head_dim.null: only a key with a default reads null as a value of its own (otherwise null reads as absent)`},
		{"{type: int, default: 64, null: \"none\"}", `descriptors/a.yaml:10: config.keys.head_dim.null: `},
	} {
		yaml := strings.Replace(base, "    head_dim: {type: int, required: true}\n", "    head_dim: "+c.spec+"\n", 1)
		_, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(yaml)})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %s...", c.spec, err, c.want)
		}
	}
}
