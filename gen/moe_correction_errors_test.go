package gen

import (
	"strings"
	"testing"
)

// TestCorrectionAndLayerDropErrors: a correction bias under an unknown
// module, and drop rules that name no single kind of tensor, each with its
// exact message.
func TestCorrectionAndLayerDropErrors(t *testing.T) {
	sigmoid := strings.Replace(moeBase, "    hidden: intermediate_size\n", "    hidden: intermediate_size\n    router: sigmoid_bias_norm\n", 1)
	for _, c := range []struct{ name, yaml, want string }{
		{"correction under an unknown module", sigmoid + "weights:\n  experts: {correction_in: block}\n",
			`descriptors/a.yaml:27: weights.experts.correction_in: unknown "block" (want router or mlp)`},
		{"a correction bias for a softmax router", moeBase + "weights:\n  experts: {correction_in: mlp}\n",
			"descriptors/a.yaml:26: weights.experts.correction_in: only a sigmoid_group, score_group, score_topk_norm, sigmoid_bias_norm, sigmoid_topk or float32_score_norm router reads a correction bias"},
		{"a drop rule with a name and a layer", moeBase + "weights:\n  drop:\n    - {name: lm_head.weight, layer: num_hidden_layers}\n",
			"descriptors/a.yaml:27: weights.drop[0]: needs exactly one of name, contains and layer"},
		{"a drop rule with nothing to drop", moeBase + "weights:\n  drop:\n    - {when: true}\n",
			"descriptors/a.yaml:27: weights.drop[0]: needs exactly one of name, contains and layer"},
		{"a layer that is no int", moeBase + "weights:\n  drop:\n    - {layer: rms_norm_eps}\n",
			`descriptors/a.yaml:27: weights.drop[0].layer: "rms_norm_eps" is float, want int`},
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
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(sigmoid + "weights:\n  experts: {correction_in: mlp}\n  drop:\n    - {layer: num_hidden_layers}\n")}); err != nil {
		t.Fatalf("a sigmoid_bias_norm router with its bias under the MLP, and a layer drop: %v", err)
	}
}
