package gen

import (
	"strings"
	"testing"
)

// TestVariantErrors: the bad variants entries, each with its exact
// message; a good one resolves, and its target is checked once every
// descriptor is built.
func TestVariantErrors(t *testing.T) {
	withVariant := func(v string) string {
		return strings.Replace(base, "structure:\n", "variants:\n"+v+"structure:\n", 1)
	}
	enc := strings.Replace(strings.Replace(base, "model_type: a", "model_type: b", 1), "structure:\n", "structure:\n  encoder: {pooling: mean}\n", 1)
	good := withVariant("  - {when: \"rms_norm_eps > 0.5\", runs: b}\n")
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(good), "descriptors/b.yaml": []byte(enc)}); err != nil {
		t.Fatalf("a good variant: %v", err)
	}
	for _, c := range []struct{ name, a, b, want string }{
		{"no runs", withVariant("  - {when: \"true\"}\n"), enc,
			"descriptors/a.yaml:15: variants[0]: needs when (a condition on the config) and runs (the model_type that runs such configs)"},
		{"a condition that is no bool", withVariant("  - {when: hidden_size, runs: b}\n"), enc,
			`descriptors/a.yaml:15: variants[0].when: "hidden_size" is int, want bool`},
		{"its own model_type", withVariant("  - {when: \"true\", runs: a}\n"), enc,
			"descriptors/a.yaml:15: variants[0].runs: runs its own model_type"},
		{"no such descriptor", withVariant("  - {when: \"true\", runs: c}\n"), enc,
			`descriptors/a.yaml:15: variants[0].runs: no descriptor for "c" (a wrapper cannot run a variant)`},
		{"a target with variants", withVariant("  - {when: \"true\", runs: b}\n"),
			strings.Replace(enc, "structure:\n", "variants:\n  - {when: \"true\", runs: a}\nstructure:\n", 1),
			`descriptors/a.yaml:15: variants[0].runs: "b" has variants of its own`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(c.a), "descriptors/b.yaml": []byte(c.b)})
			if err == nil {
				t.Fatalf("no error; want %s", c.want)
			}
			if err.Error() != c.want {
				t.Fatalf("error\n%s\nwant\n%s", err, c.want)
			}
		})
	}
}
