package gen

import (
	"strings"
	"testing"
)

// TestSinksAndExpertActErrors: the bad descriptors of attention sinks, a
// router's bias, the experts' clamped SwiGLU and the interleaved gate/up
// layout, each with its exact message.
func TestSinksAndExpertActErrors(t *testing.T) {
	moe := func(extra string) string {
		return strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n"+extra, 1)
	}
	attn := func(extra string) string {
		return strings.Replace(base, "structure:\n", "structure:\n  attention:\n"+extra, 1)
	}
	for _, c := range []struct{ name, yaml string }{
		{"sinks", attn("    sinks: true\n")},
		{"clamped swiglu", moe("    act: clamped_swiglu\n    alpha: 1.702\n    limit: 7.0\n    router_bias: true\n")},
		{"interleaved gate_up", moeBase + "weights:\n  experts: {interleaved_gate_up: gate_up_proj}\n"},
	} {
		if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(c.yaml)}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"sinks with a soft cap", attn("    sinks: true\n    softcap: 50.0\n"),
			"descriptors/a.yaml:16: structure.attention.sinks: soft-capped attention is written out and takes no sinks"},
		{"sinks in float32", attn("    sinks: true\n    float32: true\n"),
			"descriptors/a.yaml:16: structure.attention.sinks: attention in float32 takes no sinks; set one of the two"},
		{"sinks not a bool", attn("    sinks: 2\n"),
			`descriptors/a.yaml:16: structure.attention.sinks: want true or false, got 2`},
		{"unknown expert activation", moe("    act: swish\n"),
			`descriptors/a.yaml:23: structure.moe.act: unknown "swish" (want one of swiglu, clamped_swiglu, relu2, geglu, gelu_tanh)`},
		{"clamped swiglu without limit", moe("    act: clamped_swiglu\n    alpha: 1.702\n"),
			"descriptors/a.yaml:23: structure.moe.limit: the clamped_swiglu activation needs limit"},
		{"alpha without clamped swiglu", moe("    alpha: 1.702\n"),
			"descriptors/a.yaml:23: structure.moe.alpha: alpha and limit belong to the clamped_swiglu activation (act is swiglu)"},
		{"router bias on a bare router", moe("    router_matrix: true\n    router_bias: true\n"),
			"descriptors/a.yaml:24: structure.moe.router_bias: a router_matrix router is a bare weight, with no bias"},
		{"router bias not a condition", moe("    router_bias: top_k\n"),
			`descriptors/a.yaml:23: structure.moe.router_bias: "top_k" is int, want bool`},
		{"interleaved and fused gate_up", moeBase + "weights:\n  experts: {interleaved_gate_up: gate_up_proj, fused_gate_up: input_linear, fused_down: output_linear}\n",
			"descriptors/a.yaml:26: weights.experts.interleaved_gate_up: the experts' gate and up are fused once: fused_gate_up or interleaved_gate_up, not both"},
		{"a bad interleaved name", moeBase + "weights:\n  experts: {interleaved_gate_up: \"gate up\"}\n",
			`descriptors/a.yaml:26: weights.experts.interleaved_gate_up: "gate up" is not a checkpoint name (dotted names of letters, digits and _)`},
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
