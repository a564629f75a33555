package gen

import (
	"strings"
	"testing"
)

// TestRopeScalingErrors: bad uses of a sliding rope's own scaling and of
// the rope types read as unscaled, each with its exact message.
func TestRopeScalingErrors(t *testing.T) {
	keys := "    rope_theta: {type: float, default: 10000}\n"
	scaled := strings.Replace(base, keys, keys+"    rope_scaling: {type: rope_scaling, optional: true}\n    local_scaling: {type: rope_scaling, optional: true}\n", 1)
	with := func(s string) string { return strings.Replace(scaled, "structure:\n", "structure:\n"+s, 1) }
	sliding := "  attention:\n    sliding: \"i == 1\"\n    window: \"4\"\n"
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(with(sliding + "  rope:\n    kind: scaled\n    scaling: rope_scaling\n    unscaled: [linear]\n    sliding: {kind: scaled, scaling: local_scaling}\n"))}); err != nil {
		t.Fatalf("a sliding rope's own scaling: %v", err)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"unscaled types of a plain rope", with("  rope:\n    unscaled: [linear]\n"),
			"descriptors/a.yaml:18: structure.rope.unscaled: only a scaled rope reads rope types, and so reads some as unscaled"},
		{"an empty unscaled type", with("  rope:\n    kind: scaled\n    scaling: rope_scaling\n    unscaled: [\"\"]\n"),
			"descriptors/a.yaml:20: structure.rope.unscaled: an empty rope type"},
		{"a plain sliding rope's scaling", with(sliding + "  rope:\n    kind: scaled\n    scaling: rope_scaling\n    sliding: {kind: plain, scaling: local_scaling}\n"),
			"descriptors/a.yaml:23: structure.rope.sliding.scaling: a plain rope reads no rope_scaling"},
		{"a sliding scaling that is no rope_scaling key", with(sliding + "  rope:\n    kind: scaled\n    scaling: rope_scaling\n    sliding: {scaling: rope_theta}\n"),
			`descriptors/a.yaml:23: structure.rope.sliding.scaling: "rope_theta" is not a config key of type rope_scaling`},
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
