package gen

import (
	"strings"
	"testing"
)

// withStructure is base with lines added under structure (before mlp:).
func withStructure(lines string) string {
	return strings.Replace(base, "  mlp:", lines+"  mlp:", 1)
}

// TestStructureErrors: the per-layer-type rope, the head tied by
// the checkpoint, the weightless q and k norms, the expression functions
// and a wrapper's top-level defaults used wrongly, each with its exact
// message naming the file, the line and the key.
func TestStructureErrors(t *testing.T) {
	sliding := "  attention:\n    sliding: \"i % 2 == 0\"\n    window: \"4\"\n"
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"sliding rope without sliding layers", map[string]string{"descriptors/a.yaml": withStructure("  rope:\n    sliding: {base: \"100.0\"}\n")},
			`descriptors/a.yaml:16: structure.rope.sliding: there are no sliding layers (structure.attention.sliding) to give a rope of their own`},
		{"sliding rope of kind none", map[string]string{"descriptors/a.yaml": withStructure(sliding + "  rope:\n    sliding: {kind: none}\n")},
			`descriptors/a.yaml:19: structure.rope.sliding.kind: none: layers without positions are structure.rope.layers`},
		{"sliding rope that scales without a scaling key", map[string]string{"descriptors/a.yaml": withStructure(sliding + "  rope:\n    sliding: {kind: scaled}\n")},
			`descriptors/a.yaml:19: structure.rope.sliding.kind: a scaled rope needs structure.rope.scaling, which the plain rope does not read`},
		{"sliding rope base not a number", map[string]string{"descriptors/a.yaml": withStructure(sliding + "  rope:\n    sliding: {base: rope_local}\n")},
			`descriptors/a.yaml:19: structure.rope.sliding.base: unknown name "rope_local"`},
		{"head tied two ways", map[string]string{"descriptors/a.yaml": withStructure("  head:\n    tied: \"true\"\n    tied_when_missing: true\n")},
			`descriptors/a.yaml:17: structure.head.tied_when_missing: the checkpoint decides whether the head is tied; structure.head.tied (true) cannot too`},
		{"qk_norm_when not a bool", map[string]string{"descriptors/a.yaml": withStructure("  attention:\n    qk_norm: per_head_unweighted\n    qk_norm_when: head_dim\n")},
			`descriptors/a.yaml:17: structure.attention.qk_norm_when: "head_dim" is int, want bool`},
		{"divisor of a string's length", map[string]string{"descriptors/a.yaml": strings.Replace(withStructure("  attention:\n    sliding: 'p[i % len(p)] == \"L\"'\n    window: \"4\"\n"),
			"    vocab_size:", "    p: {type: string, default: LG}\n    vocab_size:", 1)},
			`descriptors/a.yaml:17: structure.attention.sliding: the divisor of % must be a positive literal or a key with min: 1`},
		{"string indexed by a float", map[string]string{"descriptors/a.yaml": strings.Replace(withStructure("  attention:\n    sliding: 'p[rope_theta] == \"L\"'\n    window: \"4\"\n"),
			"    vocab_size:", "    p: {type: string, default: LG}\n    vocab_size:", 1)},
			`descriptors/a.yaml:17: structure.attention.sliding: a string's index is an int, got float`},
		{"bfloat16 of a bool", map[string]string{"descriptors/a.yaml": withStructure("  embed_scale: bfloat16(true)\n")},
			`descriptors/a.yaml:15: structure.embed_scale: bfloat16 does not take (bool)`},
		{"clip_residual not a bool", map[string]string{"descriptors/a.yaml": withStructure("  clip_residual: float16\n")},
			`descriptors/a.yaml:15: structure.clip_residual: want true or false, got "float16"`},
		{"wrapper top default not in top_wins", map[string]string{"descriptors/a.yaml": base,
			"descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: a\n  top_defaults: {vocab_size: 262208}\n"},
			`descriptors/w.yaml:6: wrapper.top_defaults.vocab_size: not in wrapper.top_wins, so the text model would never read it`},
		{"wrapper top default without a value", map[string]string{"descriptors/a.yaml": base,
			"descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: a\n  top_wins: [vocab_size]\n  top_defaults: {vocab_size: null}\n"},
			`descriptors/w.yaml:7: wrapper.top_defaults.vocab_size: want a value`},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string][]byte{}
			for k, v := range c.files {
				files[k] = []byte(v)
			}
			_, err := Resolve(files)
			if err == nil || err.Error() != c.want {
				t.Fatalf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
	// Each construct used rightly resolves.
	for _, ok := range []string{
		sliding + "  rope:\n    sliding: {kind: plain, base: \"100.0\"}\n",
		"  head:\n    tied_when_missing: true\n",
		"  attention:\n    qk_norm: per_head_unweighted\n    qk_norm_when: \"head_dim > 4\"\n",
		"  embed_scale: \"bfloat16(max(hidden_size, 1) ** 0.5)\"\n",
		"  clip_residual: true\n",
	} {
		if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(withStructure(ok))}); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
