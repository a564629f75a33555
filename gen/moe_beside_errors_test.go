package gen

import (
	"strings"
	"testing"
)

// TestMoEBesideErrors: bad uses of the router's norm and imprecise
// softmax, the experts' module, and experts beside the dense MLP, each
// with its exact message.
func TestMoEBesideErrors(t *testing.T) {
	moe := func(lines string) string {
		return strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n"+lines, 1)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"an imprecise softmax on another router", moe("    precise: false\n"),
			"descriptors/a.yaml:23: structure.moe.precise: only a topk_softmax router without float32 takes its softmax in the logits' dtype"},
		{"an imprecise float32 softmax", moe("    router: topk_softmax\n    float32: true\n    precise: false\n"),
			"descriptors/a.yaml:25: structure.moe.precise: only a topk_softmax router without float32 takes its softmax in the logits' dtype"},
		{"a router norm on a float32 router", moe("    router: sigmoid_bias_norm\n    router_norm: \"1.0\"\n"),
			"descriptors/a.yaml:24: structure.moe.router_norm: a sigmoid_bias_norm router reads its input in float32, with no norm"},
		{"a router norm not a number", moe("    router_norm: top_k > 1\n"),
			`descriptors/a.yaml:23: structure.moe.router_norm: "top_k > 1" is bool, want float`},
		{"an unknown experts' module", moeBase + "weights:\n  experts: {at: block}\n",
			`descriptors/a.yaml:26: weights.experts.at: unknown "block" (want mlp or layer)`},
		{"a bad beside norm name", moeBase + "weights:\n  experts: {in_norm: \"pre ff\"}\n",
			`descriptors/a.yaml:26: weights.experts.in_norm: "pre ff" is not a checkpoint name (dotted names of letters, digits and _)`},
		{"a shared expert beside the dense MLP", moe("    shared: intermediate_size\n    beside_dense: true\n"),
			"descriptors/a.yaml:24: structure.moe.beside_dense: experts beside the dense MLP take no shared expert: the dense MLP is on every token already"},
		{"gelu_tanh experts with a shared expert", moe("    act: gelu_tanh\n    shared: intermediate_size\n"),
			"descriptors/a.yaml:23: structure.moe.act: gelu_tanh experts take no shared expert (a shared expert is a SwiGLU, or relu2 beside relu2 experts)"},
		{"a logit cap on another router", moe("    softcap: \"5.0\"\n"),
			"descriptors/a.yaml:23: structure.moe.softcap: only a float32_score_norm router caps its logits or scores by sqrt(softplus)"},
		{"experts beside the dense MLP in a parallel block", strings.Replace(moe("    beside_dense: true\n"), "structure:\n", "structure:\n  block: parallel\n", 1),
			"descriptors/a.yaml:24: structure.moe.beside_dense: a parallel block takes no experts beside the dense MLP: that needs a block of attention then the MLP"},
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
