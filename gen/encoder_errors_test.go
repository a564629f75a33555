package gen

import (
	"strings"
	"testing"
)

// TestEncoderDescriptorErrors: the bad descriptors of an encoder
// (structure.encoder) and of the post_residual block, each with its exact
// message.
func TestEncoderDescriptorErrors(t *testing.T) {
	encoder := func(body string) string {
		return strings.Replace(base, "structure:\n", "structure:\n  encoder:\n"+body, 1)
	}
	block := func(extra string) string {
		return strings.Replace(base, "structure:\n", "structure:\n  block: post_residual\n"+extra, 1)
	}
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(encoder("    pooling: mean\n    final_norm: false\n"))}); err != nil {
		t.Fatalf("an encoder: %v", err)
	}
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(block(""))}); err != nil {
		t.Fatalf("a post_residual block: %v", err)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"no pooling", encoder("    token_types: \"2\"\n"),
			"descriptors/a.yaml:16: structure.encoder.token_types: belongs to an encoder, which says how its embeddings pool (structure.encoder.pooling: mean, cls or last)"},
		{"unknown pooling", encoder("    pooling: max\n"),
			`descriptors/a.yaml:16: structure.encoder.pooling: unknown "max" (mean, cls or last)`},
		{"a classifier without its output", encoder("    pooling: cls\n    classifier: {dense: pooler.dense}\n"),
			"descriptors/a.yaml:17: structure.encoder.classifier.out: a classifier needs its output layer's name"},
		{"an activation without a dense layer", encoder("    pooling: cls\n    classifier: {activation: tanh, out: classifier}\n"),
			"descriptors/a.yaml:17: structure.encoder.classifier.activation: activates the dense layer, and classifier.dense names none"},
		{"an unknown activation", encoder("    pooling: cls\n    classifier: {dense: pooler.dense, activation: relu, out: classifier}\n"),
			`descriptors/a.yaml:17: structure.encoder.classifier.activation: unknown "relu" (tanh or gelu)`},
		{"an output that is no name", encoder("    pooling: cls\n    classifier: {out: \"class ifier\"}\n"),
			`descriptors/a.yaml:17: structure.encoder.classifier.out: "class ifier" is not a checkpoint name (dotted names of letters, digits and _)`},
		{"a norm without an output", encoder("    pooling: cls\n    classifier: {norm: head.norm}\n"),
			"descriptors/a.yaml:17: structure.encoder.classifier.out: a classifier needs its output layer's name"},
		{"a norm that is no name", encoder("    pooling: cls\n    classifier: {norm: \"head norm\", out: classifier}\n"),
			`descriptors/a.yaml:17: structure.encoder.classifier.norm: "head norm" is not a checkpoint name (dotted names of letters, digits and _)`},
		{"a dense bias without a dense layer", encoder("    pooling: cls\n    classifier: {dense_bias: \"false\", out: classifier}\n"),
			"descriptors/a.yaml:17: structure.encoder.classifier.dense_bias: is the dense layer's bias, and classifier.dense names none"},
		{"a pooling that is no string", encoder("    pooling: cls\n    classifier: {pooling: \"2\", out: classifier}\n"),
			`descriptors/a.yaml:17: structure.encoder.classifier.pooling: "2" is int, want string`},
		{"a dense bias that is no bool", encoder("    pooling: cls\n    classifier: {dense: head.dense, dense_bias: \"2\", out: classifier}\n"),
			`descriptors/a.yaml:17: structure.encoder.classifier.dense_bias: "2" is int, want bool`},
		{"token types that are no int", encoder("    pooling: mean\n    token_types: \"1.5\"\n"),
			`descriptors/a.yaml:17: structure.encoder.token_types: "1.5" is float, want int`},
		{"a post_residual block with clipped sums", block("  clip_residual: true\n"),
			"descriptors/a.yaml:16: structure.clip_residual: a post_residual block norms each residual sum as it is; clipped sums are not supported with it"},
		{"a post_residual block with a residual scale", block("  residual_scale: \"0.5\"\n"),
			"descriptors/a.yaml:16: structure.residual_scale: a post_residual block norms each residual sum as it is; a residual scale is not supported with it"},
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
