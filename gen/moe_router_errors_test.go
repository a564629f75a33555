package gen

import (
	"strings"
	"testing"
)

// TestMoERouterErrors: bad uses of the routers' correction bias and
// jitter, each with its exact message.
func TestMoERouterErrors(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"correction_from on another router", moeBase + "weights:\n  experts: {correction_from: e_score_correction_bias}\n",
			"descriptors/a.yaml:26: weights.experts.correction_from: only a sigmoid_group, score_group, score_topk_norm, sigmoid_bias_norm, sigmoid_topk or float32_score_norm router reads a correction bias"},
		{"a bad correction_from name", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    router: sigmoid_group\n", 1) + "weights:\n  experts: {correction_from: \"e score\"}\n",
			`descriptors/a.yaml:27: weights.experts.correction_from: "e score" is not a checkpoint name (dotted names of letters, digits and _)`},
		{"sparsemixer without jitter", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    router: sparsemixer\n", 1),
			"descriptors/a.yaml:23: structure.moe.jitter: a sparsemixer router needs jitter"},
		{"jitter on another router", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    jitter: 0.01\n", 1),
			"descriptors/a.yaml:23: structure.moe.jitter: only a sparsemixer router has a jitter"},
		{"jitter not a number", strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    router: sparsemixer\n    jitter: top_k > 1\n", 1),
			`descriptors/a.yaml:24: structure.moe.jitter: "top_k > 1" is bool, want float`},
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
