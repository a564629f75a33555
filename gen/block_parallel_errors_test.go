package gen

import (
	"strings"
	"testing"
)

// TestParallelBlockErrors: the parallel block, a fused qkv laid out by
// head, bare checkpoint names without a prefix, the head's bias and
// scale, a norm's bias, the q and k norms' conditions and kinds, float32 at
// float16 and position-scaled queries (descriptors/README.md), each used
// wrongly, with its
// exact message naming the file, the line and the key.
func TestParallelBlockErrors(t *testing.T) {
	with := func(s string) string { return strings.Replace(base, "  mlp:", s+"  mlp:", 1) }
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"parallel block naming an output norm", with("  block: parallel\n") + "weights:\n  names: {attn_out_norm: post_attention_layernorm}\n",
			`descriptors/a.yaml:21: weights.names.attn_out_norm: a parallel block has no such norm`},
		{"per-head fused qkv without fused_qkv", with("  attention:\n    fused_qkv_per_head: true\n"),
			`descriptors/a.yaml:16: structure.attention.fused_qkv_per_head: lays out a fused qkv projection by head: it needs fused_qkv`},
		{"bare names without a model prefix", base + "weights:\n  names: {model: \"\"}\n  bare: [mlp.c_fc.weight]\n",
			`descriptors/a.yaml:21: weights.bare: reads checkpoints without the model's prefix, and weights.names.model is empty`},
		{"bias on a tied head", with("  head:\n    tied: true\n    bias: true\n"),
			`descriptors/a.yaml:17: structure.head.bias: a tied head is the embedding table, which has no bias`},
		{"head bias not a bool", with("  head:\n    bias: rms_norm_eps\n"),
			`descriptors/a.yaml:16: structure.head.bias: "rms_norm_eps" is float, want bool`},
		{"norm bias on an rms norm", with("  norm:\n    bias: false\n"),
			`descriptors/a.yaml:16: structure.norm.bias: a rms norm has no bias to leave out (only layer_norm has)`},
		{"head scale not a number", with("  head:\n    scale: \"true\"\n"),
			`descriptors/a.yaml:16: structure.head.scale: "true" is bool, want float`},
		{"qk_norm_when without q and k norms", with("  attention:\n    qk_norm_when: \"true\"\n"),
			`descriptors/a.yaml:16: structure.attention.qk_norm_when: there are no q and k norms (qk_norm is none)`},
		{"qk_norm_when not a bool", with("  attention:\n    qk_norm: per_head\n    qk_norm_when: head_dim\n"),
			`descriptors/a.yaml:17: structure.attention.qk_norm_when: "head_dim" is int, want bool`},
		{"each_head on a one-plus norm", with("  norm: {kind: rms_one_plus}\n  attention:\n    qk_norm: each_head\n"),
			`descriptors/a.yaml:17: structure.attention.qk_norm: each_head norms are defined over layer_norm or rms norms; the norm kind is rms_one_plus`},
		{"qk_norm_eps without q and k norms", with("  attention:\n    qk_norm_eps: \"1.0e-6\"\n"),
			`descriptors/a.yaml:16: structure.attention.qk_norm_eps: there are no q and k norms (qk_norm is none)`},
		{"qk_norm_eps not a number", with("  attention:\n    qk_norm: per_head\n    qk_norm_eps: head_dim > 2\n"),
			`descriptors/a.yaml:17: structure.attention.qk_norm_eps: "head_dim > 2" is bool, want float`},
		{"norm offset on a layer norm", with("  norm:\n    kind: layer_norm\n    offsets: {attn_in: \"1.0\"}\n"),
			`descriptors/a.yaml:17: structure.norm.offsets.attn_in: a layer_norm norm takes no offset (only rms does)`},
		{"norm offset not a number", with("  norm:\n    offsets: {final: \"true\"}\n"),
			`descriptors/a.yaml:16: structure.norm.offsets.final: "true" is bool, want float`},
		{"kv_conv not an int", with("  attention:\n    kv_conv: rms_norm_eps\n"),
			`descriptors/a.yaml:16: structure.attention.kv_conv: "rms_norm_eps" is float, want int`},
		{"sliding rope dims without sliding layers", with("  rope:\n    sliding: {dims: head_dim}\n"),
			`descriptors/a.yaml:16: structure.rope.sliding: there are no sliding layers (structure.attention.sliding) to give a rope of their own`},
		{"sliding rope dims not an int", with("  attention:\n    sliding: \"i == 1\"\n    window: \"4\"\n  rope:\n    sliding: {dims: rms_norm_eps}\n"),
			`descriptors/a.yaml:19: structure.rope.sliding.dims: "rms_norm_eps" is float, want int`},
		{"unit_rows without eps", base + "weights:\n  unit_rows:\n    - {name: lm_head.weight}\n",
			`descriptors/a.yaml:21: weights.unit_rows[0]: needs name and eps`},
		{"unit_rows of a module", base + "weights:\n  unit_rows:\n    - {name: lm_head, eps: \"1.0e-7\"}\n",
			`descriptors/a.yaml:21: weights.unit_rows[0].name: "lm_head" is not a checkpoint tensor name ending in .weight`},
		{"unit_rows over an unknown axis", base + "weights:\n  unit_rows:\n    - {name: lm_head.weight, eps: \"1.0e-7\", over: diagonal}\n",
			`descriptors/a.yaml:21: weights.unit_rows[0].over: unknown "diagonal" (want rows or columns)`},
		{"unit_rows when not a bool", base + "weights:\n  unit_rows:\n    - {name: lm_head.weight, eps: \"1.0e-7\", when: rms_norm_eps}\n",
			`descriptors/a.yaml:21: weights.unit_rows[0].when: "rms_norm_eps" is float, want bool`},
		{"unit_rows eps not a number", base + "weights:\n  unit_rows:\n    - {name: lm_head.weight, eps: \"true\"}\n",
			`descriptors/a.yaml:21: weights.unit_rows[0].eps: "true" is bool, want float`},
		{"float32_if_float16 beside float32", with("  attention:\n    float32: true\n    float32_if_float16: true\n"),
			`descriptors/a.yaml:17: structure.attention.float32_if_float16: float32 already casts every dtype; set one of the two`},
		{"float32_if_float16 with softcap", with("  attention:\n    softcap: \"50.0\"\n    float32_if_float16: true\n"),
			`descriptors/a.yaml:17: structure.attention.float32_if_float16: soft-capped attention is written out in the model's dtype; float32 does not apply`},
		{"float32_if_float16 not a bool", with("  attention:\n    float32_if_float16: half\n"),
			`descriptors/a.yaml:16: structure.attention.float32_if_float16: want true or false, got "half"`},
		{"query_scale without positions", with("  attention:\n    query_scale: {beta: \"0.1\"}\n"),
			`descriptors/a.yaml:16: structure.attention.query_scale: beta and positions go together`},
		{"query_scale positions not an integer", with("  attention:\n    query_scale: {beta: \"0.1\", positions: rms_norm_eps}\n"),
			`descriptors/a.yaml:16: structure.attention.query_scale.positions: "rms_norm_eps" is float, want int`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(c.yaml)})
			if err == nil || err.Error() != c.want {
				t.Fatalf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
	// Each construct used rightly resolves and generates.
	for _, ok := range []string{
		"  block: parallel\n",
		"  head:\n    bias: true\n    scale: \"0.5\"\n",
		"  norm:\n    kind: layer_norm\n    bias: \"false\"\n",
		"  mlp:\n    kind: gelu_tanh\n",
		"  attention:\n    float32_if_float16: true\n",
		"  attention:\n    query_scale: {beta: \"0.1\", positions: head_dim}\n",
		"  norm: {kind: layer_norm}\n  attention:\n    qk_norm: each_head\n    qk_norm_when: \"head_dim > 4\"\n",
		"  attention:\n    qk_norm: each_head\n    qk_norm_eps: \"1.0e-6\"\n",
		"  attention:\n    kv_conv: \"2\"\n    heads: \"if(i == 0, 2, num_attention_heads)\"\n    sliding: \"i == 1\"\n    window: \"4\"\n  rope:\n    sliding: {dims: \"head_dim // 2\"}\n",
		"  norm:\n    offsets: {attn_in: \"1.0\", mlp_in: \"0.2\", final: \"5 ** -1.5\"}\n",
	} {
		y := with(ok)
		if strings.Contains(ok, "  mlp:") {
			y = strings.Replace(base, "  mlp:\n    kind: swiglu\n", ok, 1)
		}
		set, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(y)})
		if err != nil {
			t.Errorf("%q: %v", ok, err)
			continue
		}
		if _, err := Generate(set); err != nil {
			t.Errorf("%q: generates: %v", ok, err)
		}
	}
}
