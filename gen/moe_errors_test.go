package gen

import (
	"strings"
	"testing"
)

// moeBase is base with a sparse block on every layer.
var moeBase = strings.Replace(strings.Replace(base, "    vocab_size: {type: int, required: true}\n",
	"    vocab_size: {type: int, required: true}\n    num_experts: {type: int, required: true, min: 1}\n    top_k: {type: int, required: true, min: 1}\n", 1),
	"    kind: swiglu\n", "    kind: swiglu\n  moe:\n    experts: num_experts\n    top_k: top_k\n    hidden: intermediate_size\n", 1)

// TestMoEDescriptorErrors: the sparse block's bad descriptors, each with
// its exact message.
func TestMoEDescriptorErrors(t *testing.T) {
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(moeBase)}); err != nil {
		t.Fatalf("moeBase: %v", err)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown router", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    router: greedy\n", 1),
			`descriptors/a.yaml:23: structure.moe.router: unknown "greedy" (want one of softmax_topk, topk_softmax, score_topk_norm, sigmoid_group, sigmoid_bias_norm, sparsemixer, sigmoid_topk, score_group, softmax_group_max, float32_score_norm)`},
		{"shared gate without a shared expert", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    shared_gate: true\n", 1),
			"descriptors/a.yaml:23: structure.moe.shared_gate: there is no shared expert to gate"},
		{"groups on another router", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    groups: 4\n", 1),
			"descriptors/a.yaml:23: structure.moe.groups: groups and topk_groups belong to a sigmoid_group, score_group or softmax_group_max router, scale to them, sigmoid_topk and float32_score_norm"},
		{"float32 on another router", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    float32: true\n", 1),
			"descriptors/a.yaml:23: structure.moe.float32: only a topk_softmax router has a float32 softmax"},
		{"renorm_eps on another router", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    renorm_eps: \"1.0e-20\"\n", 1),
			"descriptors/a.yaml:23: structure.moe.renorm_eps: only a sigmoid_group or score_group router adds an eps to its renormalisation"},
		{"sigmoid on another router", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    sigmoid: true\n", 1),
			"descriptors/a.yaml:23: structure.moe.sigmoid: only a score_topk_norm or score_group router chooses between a softmax and a sigmoid"},
		{"sparse not per layer", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    sparse: top_k\n", 1),
			`descriptors/a.yaml:23: structure.moe.sparse: "top_k" is int, want bool`},
		{"a bad expert name", moeBase + "weights:\n  experts: {stacked: \"switch mlp\"}\n",
			`descriptors/a.yaml:26: weights.experts.stacked: "switch mlp" is not a checkpoint name (dotted names of letters, digits and _)`},
		{"a shared expert's place unknown", moeBase + "weights:\n  experts: {shared_in: router}\n",
			`descriptors/a.yaml:26: weights.experts.shared_in: unknown "router" (want mlp or layer)`},
		{"a fused shared expert without one", moeBase + "weights:\n  experts: {shared_fused: true, fused_gate_up: input_linear, fused_down: output_linear}\n",
			"descriptors/a.yaml:26: weights.experts.shared_fused: there is no shared expert (structure.moe.shared)"},
		{"a fused shared expert without fused names", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    shared: intermediate_size\n", 1) + "weights:\n  experts: {shared_fused: true}\n",
			"descriptors/a.yaml:27: weights.experts.shared_fused: the fused names come from fused_gate_up and fused_down, which are not set"},
		{"dense layers stored as an unfused shared expert", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    shared: intermediate_size\n", 1) + "weights:\n  experts: {dense_from_shared: true, fused_gate_up: input_linear, fused_down: output_linear}\n",
			"descriptors/a.yaml:27: weights.experts.dense_from_shared: needs shared_fused: the dense layers' stored form is the fused shared expert's"},
		{"ungated experts with a fused gate", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    act: relu2\n", 1) + "weights:\n  experts: {fused_gate_up: input_linear, fused_down: output_linear}\n",
			"descriptors/a.yaml:23: structure.moe.act: relu2 experts are ungated: no fused or interleaved gate, and no shared expert gate"},
		{"a correction bias on a router that reads none", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    correction: \"true\"\n", 1),
			"descriptors/a.yaml:23: structure.moe.correction: only a sigmoid_group, score_group, score_topk_norm, sigmoid_bias_norm, sigmoid_topk or float32_score_norm router reads a correction bias"},
		{"a rename to itself", moeBase + "weights:\n  rename:\n    - {from: w1.weight, to: w1.weight}\n",
			`descriptors/a.yaml:27: weights.rename[0].to: renames "w1.weight" to itself`},
		{"a rename without its target", moeBase + "weights:\n  rename:\n    - {from: w1.weight}\n",
			"descriptors/a.yaml:27: weights.rename[0]: needs from and to"},
		{"a rename of no checkpoint name", moeBase + "weights:\n  rename:\n    - {from: \"w 1\", to: w2}\n",
			`descriptors/a.yaml:27: weights.rename[0].from: "w 1" is not a checkpoint name (dotted names of letters, digits and _)`},
		{"a stacked name that is no checkpoint name", moeBase + "weights:\n  experts: {stacked_up: \"fc 1\"}\n",
			`descriptors/a.yaml:26: weights.experts.stacked_up: "fc 1" is not a checkpoint name (dotted names of letters, digits and _)`},
		{"fused gate_up alone", moeBase + "weights:\n  experts: {fused_gate_up: input_linear}\n",
			"descriptors/a.yaml:26: weights.experts.fused_gate_up: fused_gate_up and fused_down go together"},
		{"transposed down alone", moeBase + "weights:\n  experts: {transposed_down: experts.down_proj}\n",
			"descriptors/a.yaml:26: weights.experts.transposed_down: transposed_gate_up and transposed_down go together"},
		{"a transposed name that is no checkpoint name", moeBase + "weights:\n  experts: {transposed_gate_up: \"a b\", transposed_down: c}\n",
			`descriptors/a.yaml:26: weights.experts.transposed_gate_up: "a b" is not a checkpoint name (dotted names of letters, digits and _)`},
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
