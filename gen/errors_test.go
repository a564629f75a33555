package gen

import (
	"strings"
	"testing"
)

// base is a minimal valid descriptor; each case edits it or adds files.
const base = `model_type: a
doc: An architecture.
config:
  keys:
    hidden_size: {type: int, required: true, min: 1}
    num_hidden_layers: {type: int, required: true, min: 1}
    intermediate_size: {type: int, required: true}
    num_attention_heads: {type: int, required: true, min: 1}
    num_key_value_heads: {type: int, required: true, min: 1}
    head_dim: {type: int, required: true}
    rms_norm_eps: {type: float, required: true}
    rope_theta: {type: float, default: 10000}
    vocab_size: {type: int, required: true}
structure:
  mlp:
    kind: swiglu
test_config:
  hidden_size: 8
`

const child = `model_type: b
doc: Another one.
extends: a
`

// TestDescriptorErrors: one case per kind of bad descriptor, each with the
// exact message, naming the file, the line and the key.
func TestDescriptorErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"yaml syntax", map[string]string{"descriptors/a.yaml": "model_type: a\ndoc: x\nconfig: [1,\n"},
			"descriptors/a.yaml:3: did not find expected node content"},
		{"yaml mapping", map[string]string{"descriptors/a.yaml": "model_type: a\ndoc: x: y\n"},
			"descriptors/a.yaml:2: mapping values are not allowed in this context"},
		{"unknown key", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    kind: swiglu", "    kind: swiglu\n    gated: true", 1)},
			"descriptors/a.yaml:17: structure.mlp.gated: unknown key (want one of bias, hidden, kind)"},
		{"unknown top-level key", map[string]string{"descriptors/a.yaml": base + "structur: {}\n"},
			"descriptors/a.yaml:19: structur: unknown key (want one of aliases, config, doc, extends, model_type, structure, test_config, tier, weights)"},
		{"unknown value", map[string]string{"descriptors/a.yaml": strings.Replace(base, "kind: swiglu", "kind: gegl", 1)},
			`descriptors/a.yaml:16: structure.mlp.kind: unknown "gegl" (want one of swiglu, gelu_gated, gelu_tanh_gated, fused_swiglu, gelu, relu2)`},
		{"unknown type", map[string]string{"descriptors/a.yaml": strings.Replace(base, "vocab_size: {type: int", "vocab_size: {type: integer", 1)},
			`descriptors/a.yaml:13: config.keys.vocab_size.type: unknown "integer" (want one of int, float, bool, string, ints, floats, strings, rope_scaling)`},
		{"wrong type", map[string]string{"descriptors/a.yaml": strings.Replace(base, "  mlp:", "  attention:\n    fused_qkv: yes\n  mlp:", 1)},
			`descriptors/a.yaml:16: structure.attention.fused_qkv: want true or false, got "yes"`},
		{"wrong type of a list", map[string]string{"descriptors/a.yaml": base + "aliases: llama\n"},
			`descriptors/a.yaml:19: aliases: want a list of strings, got "llama"`},
		{"repeated key", map[string]string{"descriptors/a.yaml": strings.Replace(base, "  mlp:\n    kind: swiglu", "  mlp:\n    kind: swiglu\n    kind: gelu", 1)},
			"descriptors/a.yaml:17: structure.mlp.kind: repeated key (first at line 16)"},
		{"extends cycle", map[string]string{
			"descriptors/a.yaml": strings.Replace(base, "doc: An architecture.", "doc: An architecture.\nextends: b", 1),
			"descriptors/b.yaml": child},
			"descriptors/b.yaml:3: extends: cycle: a -> b -> a"},
		{"extends itself", map[string]string{"descriptors/a.yaml": strings.Replace(base, "doc: An architecture.", "doc: An architecture.\nextends: a", 1)},
			"descriptors/a.yaml:3: extends: cycle: a -> a"},
		{"missing base", map[string]string{"descriptors/a.yaml": base, "descriptors/b.yaml": strings.Replace(child, "extends: a", "extends: llama", 1)},
			`descriptors/b.yaml:3: extends: no descriptor for "llama"`},
		{"duplicate alias", map[string]string{
			"descriptors/a.yaml": base + "aliases: [mistral]\n",
			"descriptors/b.yaml": child + "aliases: [mistral]\n"},
			`descriptors/b.yaml:4: aliases[0]: "mistral" is already named at descriptors/a.yaml:19`},
		{"alias of another model_type", map[string]string{
			"descriptors/a.yaml": base,
			"descriptors/b.yaml": child + "aliases: [a]\n"},
			`descriptors/b.yaml:4: aliases[0]: "a" is already named at descriptors/a.yaml:1`},
		{"duplicate model_type", map[string]string{
			"descriptors/a.yaml":        base,
			"descriptors/registry.yaml": "remapped:\n  a: mistral3\n"},
			`descriptors/registry.yaml:2: remapped.a: "a" is already named at descriptors/a.yaml:1`},
		{"remapped to a described arch", map[string]string{
			"descriptors/a.yaml":        base,
			"descriptors/registry.yaml": "remapped:\n  foo: a\n"},
			`descriptors/registry.yaml:2: remapped.foo: "a" has a descriptor: list "foo" in its aliases instead`},
		{"duplicate remapped", map[string]string{
			"descriptors/a.yaml":        base + "aliases: [llava]\n",
			"descriptors/registry.yaml": "remapped:\n  llava: mistral3\n"},
			`descriptors/registry.yaml:2: remapped.llava: "llava" is already named at descriptors/a.yaml:19`},
		{"model_type against the file name", map[string]string{"descriptors/b.yaml": base},
			`descriptors/b.yaml:1: model_type: "a" does not match the file name (want "b")`},
		{"unknown name", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    kind: swiglu", "    kind: swiglu\n    hidden: intermediate", 1)},
			`descriptors/a.yaml:17: structure.mlp.hidden: unknown name "intermediate"`},
		{"expression type", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    kind: swiglu", "    kind: swiglu\n    bias: rms_norm_eps", 1)},
			`descriptors/a.yaml:17: structure.mlp.bias: "rms_norm_eps" is float, want bool`},
		{"expression syntax", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    kind: swiglu", "    kind: swiglu\n    hidden: \"intermediate_size *\"", 1)},
			`descriptors/a.yaml:17: structure.mlp.hidden: unexpected end`},
		{"unsafe division", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    kind: swiglu", "    kind: swiglu\n    hidden: \"hidden_size // intermediate_size\"", 1)},
			`descriptors/a.yaml:17: structure.mlp.hidden: the divisor of // must be a positive literal or a key with min: 1`},
		{"default of a missing key", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    rope_theta: {type: float, default: 10000}\n", "", 1)},
			`descriptors/a.yaml: structure.rope.base: unknown name "rope_theta" (in the default "rope_theta"; set it)`},
		{"default of the wrong type", map[string]string{"descriptors/a.yaml": strings.Replace(base, "default: 10000", "default: ten", 1)},
			`descriptors/a.yaml:12: config.keys.rope_theta.default: ten is not a float`},
		{"two presences", map[string]string{"descriptors/a.yaml": strings.Replace(base, "{type: int, required: true, min: 1}", "{type: int, required: true, default: 3, min: 1}", 1)},
			`descriptors/a.yaml:5: config.keys.hidden_size: needs exactly one of required: true, default, derive and optional: true (has 2)`},
		{"derivation cycle", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    head_dim: {type: int, required: true}",
			"    head_dim: {type: int, derive: width}\n    width: {type: int, derive: head_dim}", 1)},
			`descriptors/a.yaml:10: config: derivations form a cycle: head_dim -> width -> head_dim`},
		{"per-layer list without a length", map[string]string{"descriptors/a.yaml": strings.Replace(strings.Replace(base,
			"    vocab_size: {type: int, required: true}", "    vocab_size: {type: int, required: true}\n    nope: {type: ints, derive: 'layers(1)'}", 1),
			"  mlp:", "  rope:\n    layers: \"nope[i] == 1\"\n  mlp:", 1)},
			`descriptors/a.yaml:17: structure.rope.layers: only lists with one entry per layer (length: the layer count) can be indexed by i`},
		{"no test config", map[string]string{"descriptors/a.yaml": strings.Replace(base, "test_config:\n  hidden_size: 8\n", "", 1)},
			`descriptors/a.yaml:1: test_config: missing (required): a small config.json for the forward tests`},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string][]byte{}
			for k, v := range c.files {
				files[k] = []byte(v)
			}
			_, err := Resolve(files)
			if err == nil {
				t.Fatalf("no error; want %s", c.want)
			}
			if err.Error() != c.want {
				t.Fatalf("error\n%s\nwant\n%s", err, c.want)
			}
		})
	}
}

// TestBaseIsValid keeps the cases above honest: base resolves.
func TestBaseIsValid(t *testing.T) {
	s, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(base), "descriptors/b.yaml": []byte(child)})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Archs) != 2 || s.Arch("b").Extends != "a" {
		t.Fatalf("archs %v", s.Archs)
	}
}
