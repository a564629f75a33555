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
			"descriptors/a.yaml:19: structur: unknown key (want one of aliases, config, doc, extends, fragment, gguf, include, model_type, structure, test_config, tier, variants, weights, wrapper)"},
		{"unknown value", map[string]string{"descriptors/a.yaml": strings.Replace(base, "kind: swiglu", "kind: gegl", 1)},
			`descriptors/a.yaml:16: structure.mlp.kind: unknown "gegl" (want one of fused_gelu_gated, fused_swiglu, gelu, gelu_gated, gelu_tanh, gelu_tanh_gated, relu2, shifted_relu2, swiglu, xielu)`},
		{"unknown type", map[string]string{"descriptors/a.yaml": strings.Replace(base, "vocab_size: {type: int", "vocab_size: {type: integer", 1)},
			`descriptors/a.yaml:13: config.keys.vocab_size.type: unknown "integer" (want one of int, float, bool, string, ints, floats, strings, rope_scaling, bools)`},
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
		{"key that is no name", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    vocab_size:", "    \"vocab size\": {type: int, optional: true}\n    vocab_size:", 1)},
			`descriptors/a.yaml:13: config.keys.vocab size: "vocab size" is not a name (letters, digits and _, not first a digit)`},
		{"keys of one Go name", map[string]string{"descriptors/a.yaml": strings.Replace(base, "    vocab_size:", "    vocab__size: {type: int, optional: true}\n    vocab_size:", 1)},
			`descriptors/a.yaml:14: config.keys.vocab_size: is spelled VocabSize in Go, as vocab__size is`},
		{"include of a missing fragment", map[string]string{"descriptors/a.yaml": base + "include: [sliding]\n"},
			`descriptors/a.yaml:19: include[0]: no fragment "sliding" (want descriptors/fragments/sliding.yaml)`},
		{"fragment included twice", map[string]string{"descriptors/a.yaml": base + "include: [f, f]\n", "descriptors/fragments/f.yaml": frag("f", "")},
			`descriptors/a.yaml:19: include[1]: "f" is included twice`},
		{"fragments that overlap", map[string]string{"descriptors/a.yaml": base + "include: [f, g]\n",
			"descriptors/fragments/f.yaml": frag("f", "structure:\n  attention:\n    scale: \"1.0\"\n"),
			"descriptors/fragments/g.yaml": frag("g", "structure:\n  attention:\n    scale: \"2.0\"\n")},
			`descriptors/fragments/g.yaml:5: structure.attention.scale: set by fragment g and by fragment f (descriptors/fragments/f.yaml:5); a descriptor's fragments may not overlap`},
		{"fragment with a model_type", map[string]string{"descriptors/a.yaml": base, "descriptors/fragments/f.yaml": frag("f", "model_type: f\n")},
			`descriptors/fragments/f.yaml:3: model_type: a fragment has none (only a descriptor has model_type, tier, aliases, extends, include)`},
		{"fragment that extends", map[string]string{"descriptors/a.yaml": base, "descriptors/fragments/f.yaml": frag("f", "extends: a\n")},
			`descriptors/fragments/f.yaml:3: extends: a fragment has none (only a descriptor has model_type, tier, aliases, extends, include)`},
		{"fragment against its file name", map[string]string{"descriptors/a.yaml": base, "descriptors/fragments/g.yaml": frag("f", "")},
			`descriptors/fragments/g.yaml:1: fragment: "f" does not match the file name (want "g")`},
		{"fragment without its name", map[string]string{"descriptors/a.yaml": base, "descriptors/fragments/f.yaml": "doc: A fragment.\n"},
			`descriptors/fragments/f.yaml:1: fragment: missing (required): the fragment's name, "f"`},
		{"fragment without a doc", map[string]string{"descriptors/a.yaml": base, "descriptors/fragments/f.yaml": "fragment: f\n"},
			`descriptors/fragments/f.yaml:1: doc: missing (required): what the fragment brings`},
		{"descriptor that says it is a fragment", map[string]string{"descriptors/a.yaml": base + "fragment: a\n"},
			`descriptors/a.yaml:19: fragment: only files in descriptors/fragments/ are fragments; a descriptor includes them (include: [...])`},
		{"bad value in a fragment", map[string]string{"descriptors/a.yaml": base + "include: [f]\n",
			"descriptors/fragments/f.yaml": frag("f", "structure:\n  attention:\n    window: windw\n    sliding: \"true\"\n")},
			`descriptors/fragments/f.yaml:5: structure.attention.window: unknown name "windw"`},
		{"checkpoint name that is no name", map[string]string{"descriptors/a.yaml": base + "weights:\n  names: {q: \"q proj\"}\n"},
			`descriptors/a.yaml:20: weights.names.q: "q proj" is not a checkpoint name (dotted names of letters, digits and _)`},
		{"checkpoint names of one Go field", map[string]string{"descriptors/a.yaml": base + "weights:\n  names: {gate: up_proj}\n"},
			`descriptors/a.yaml:20: weights.names: up_proj and up_proj are both UpProj in Go, in one module`},
		{"gguf section without its arch", map[string]string{"descriptors/a.yaml": base + "gguf:\n  class: A\n"},
			`descriptors/a.yaml:20: gguf.arch: missing (required): the file's general.architecture`},
		{"gguf section without its class", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n"},
			`descriptors/a.yaml:20: gguf.class: missing (required): config.json's architectures entry`},
		{"gguf section without tensors", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n"},
			`descriptors/a.yaml:20: gguf.tensors: missing (required): llama.cpp's names of a layer's tensors`},
		{"gguf tensor that is no checkpoint name", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  tensors: {attn_q: \"q proj\"}\n"},
			`descriptors/a.yaml:22: gguf.tensors.attn_q: want a checkpoint name within the layer, got "q proj"`},
		{"gguf tensor name that is not llama.cpp's", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  tensors: {Attn-Q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.tensors.Attn-Q: "Attn-Q" is not a llama.cpp tensor name (words of lower-case letters, digits and _ joined by dots; ending .weight or .bias to map one tensor whole)`},
		{"gguf key that is no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  tensors: {attn_q: q_proj}\n  keys: {attention.scale: no_such_key}\n"},
			`descriptors/a.yaml:23: gguf.keys.attention.scale: want a config key of the descriptor, got "no_such_key"`},
		{"gguf key that is no metadata key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  tensors: {attn_q: q_proj}\n  keys: {\"Attention Scale\": hidden_size}\n"},
			`descriptors/a.yaml:23: gguf.keys.Attention Scale: "Attention Scale" is not a GGUF metadata key within the architecture's (lower-case words joined by dots)`},
		{"gguf width rule on no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  tensors: {attn_q: q_proj}\n  width_per_head: {key: no_such_key, layers: [62]}\n"},
			`descriptors/a.yaml:23: gguf.width_per_head.key: want a config key of the descriptor, got "no_such_key"`},
		{"gguf width rule without layer counts", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  tensors: {attn_q: q_proj}\n  width_per_head: {key: hidden_size, layers: 62}\n"},
			`descriptors/a.yaml:23: gguf.width_per_head.layers: want a list of layer counts`},
		{"gguf requires that is no metadata key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  requires: Expert Count\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.requires: "Expert Count" is not a GGUF metadata key within the architecture's (lower-case words joined by dots), alone or as "key == N" (a whole number)`},
		{"gguf requires a value that is no whole number", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  requires: expert_gating_func == sigmoid\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.requires: "expert_gating_func == sigmoid" is not a GGUF metadata key within the architecture's (lower-case words joined by dots), alone or as "key == N" (a whole number)`},
		{"gguf computed into no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  computed: {no_such_key: a.b - c}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.computed.no_such_key: want a config key of the descriptor`},
		{"gguf computed from no expression", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  computed: {hidden_size: a.b % c}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.computed.hidden_size: want two GGUF metadata keys within the architecture's and an operation between them, spaced ("attention.key_length - rope.dimension_count"; + - * /; the second may be sqrt(key)), got "a.b % c"`},
		{"gguf join of a module no tensor maps to", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  join: {qkv_proj: [q_proj, k_proj]}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.join.qkv_proj: "k_proj" is not a checkpoint module gguf.tensors maps to`},
		{"gguf kv_layers experts without ffn", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  kv_layers: {key: head_dim, attention: A, other: M, experts: E}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.kv_layers.experts: needs ffn: the word of feed-forward layers without a router`},
		{"gguf kv_layers word for two kinds", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  kv_layers: {key: head_dim, attention: A, other: M, ffn: M}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.kv_layers: want a word of its own for each kind of layer, got "M" twice`},
		{"gguf kv_layers in no form", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  kv_layers: {key: head_dim, attention: A, other: M, form: bits}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.kv_layers.form: want letters or words, got "bits"`},
		{"gguf kv_layers letters that are words", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  kv_layers: {key: head_dim, attention: attention, other: mamba, form: letters}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.kv_layers.form: letters: each word must be one letter, got "attention"`},
		{"gguf split of no mapped module", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  split: {gate_up: [gate, up]}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.split.gate_up: "gate_up" is not a checkpoint module gguf.tensors maps to`},
		{"gguf lacking of one tensor", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  lacking: {head_dim: [attn_k.weight]}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.lacking.head_dim: want two of llama.cpp's tensor names within a layer ([attn_k.weight, attn_v.weight]: true where a layer holds the first and not the second)`},
		{"gguf window rope under nothing read", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  window_rope: rope_parameters\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.window_rope: want a config key whose full_attention and sliding_attention entries the descriptor reads (a key's fallback or prefer path under it), got "rope_parameters"`},
		{"gguf kv window without sliding layers", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  kv_window: num_key_value_heads\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.kv_window: needs sliding_layers: which layers are full-attention ones`},
		{"gguf unread tensors not mapped", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  unread_in_last: {count: head_dim, tensors: [attn_k]}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.unread_in_last.tensors: want tensor names of gguf.tensors`},
		{"gguf sparse layers under no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  sparse_layers: is_moe_layer\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.sparse_layers: want a config key of the descriptor, got "is_moe_layer"`},
		{"gguf join groups of no join", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  join_groups: {qkv_proj: num_attention_heads}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.join_groups.qkv_proj: want a module of gguf.join`},
		{"gguf join groups under no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  join: {qkv_proj: [q_proj, k_proj]}\n  join_groups: {qkv_proj: no_such_key}\n  tensors: {attn_q: q_proj, attn_k: k_proj}\n"},
			`descriptors/a.yaml:23: gguf.join_groups.qkv_proj: want a config key of the descriptor (the groups' count), got "no_such_key"`},
		{"gguf split groups of no split", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  split_groups: {ba: head_dim}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.split_groups.ba: want a module of gguf.split`},
		{"gguf alias config of no alias", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  alias_config: {b: {head_dim: 2}}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.alias_config.b: want one of gguf.aliases`},
		{"gguf enums into no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  enums:\n    gating: {key: score, words: {1: softmax}}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:23: gguf.enums.gating.key: want a config key of the descriptor, got "score"`},
		{"gguf enums of no number", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  enums:\n    gating: {key: head_dim, words: {one: softmax}}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:23: gguf.enums.gating.words: want whole numbers and the words they are, got "one": "softmax"`},
		{"gguf flatten of no mapped tensor", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  flatten: [ssm_a]\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.flatten: "ssm_a" is not a tensor name of gguf.tensors`},
		{"gguf rope fraction on no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  rope_fraction: no_such_key\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.rope_fraction: want a config key of the descriptor, got "no_such_key"`},
		{"gguf flag on no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  flags: {no_such_key: attn_q.bias}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.flags.no_such_key: want a config key of the descriptor`},
		{"gguf flag on no tensor name", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  flags: {hidden_size: attn_q}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.flags.hidden_size: want llama.cpp's name of a tensor within a layer (attn_q.bias), got "attn_q"`},
		{"gguf qkv by head without attn_qkv", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  qkv_by_head: true\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.qkv_by_head: needs the fused projection's tensor (attn_qkv) in gguf.tensors`},
		{"gguf stored_as on no mapped tensor", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  stored_as: {ssm_a: negative_exp}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.stored_as.ssm_a: want a tensor name of gguf.tensors`},
		{"gguf stored_as in no known form", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  stored_as: {attn_q: exp}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.stored_as.attn_q: want negative_exp (the file holds -exp(x) of the checkpoint's x), got "exp"`},
		{"gguf trailing axis on no mapped tensor", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  trailing_axis: [ssm_conv1d]\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.trailing_axis: "ssm_conv1d" is not a tensor name of gguf.tensors`},
		{"gguf kv layers into no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  kv_layers: {key: no_such_key, attention: a, other: b}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.kv_layers.key: want a config key of the descriptor, got "no_such_key"`},
		{"gguf kv layers of one word", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  kv_layers: {key: hidden_size, attention: a, other: a}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.kv_layers: want two different words: attention (layers with key/value heads) and other`},
		{"gguf final norm that is no tensor name", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  final_norm: Final Norm\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.final_norm: "Final Norm" is not a llama.cpp tensor name`},
		{"gguf rope scaling under no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  rope_scaling: no_such_key\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.rope_scaling: want a config key of the descriptor, got "no_such_key"`},
		{"gguf copy into no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  copy: {no_such_key: hidden_size}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.copy.no_such_key: want a config key of the descriptor`},
		{"gguf copy of no config key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  copy: {hidden_size: no_such_key}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.copy.hidden_size: want a config key of the descriptor, or one the reader writes (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, max_position_embeddings, num_key_value_heads, head_dim, rope_theta, rms_norm_eps, vocab_size, tie_word_embeddings, bos_token_id, eos_token_id), to take the value of, got "no_such_key"`},
		{"gguf sliding layers in no form", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  sliding_layers: {key: hidden_size, form: bits}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.sliding_layers.form: want letters or types, got "bits"`},
		{"gguf extra layers that is no metadata key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  extra_layers: Next N\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.extra_layers: "Next N" is not a GGUF metadata key within the architecture's (lower-case words joined by dots)`},
		{"gguf layer values under no metadata key", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  layer_values: {Alpha N: act.alpha_n}\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/a.yaml:22: gguf.layer_values.Alpha N: "Alpha N" is not a GGUF metadata key (lower-case words joined by dots)`},
		{"gguf config that is not a scalar", map[string]string{"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  tensors: {attn_q: q_proj}\n  config: {x: [1, b]}\n"},
			`descriptors/a.yaml:23: gguf.config.x: want a number, a string, true/false or a list of numbers`},
		{"gguf arch of two descriptors", map[string]string{
			"descriptors/a.yaml": base + "gguf:\n  arch: a\n  class: A\n  tensors: {attn_q: q_proj}\n",
			"descriptors/b.yaml": child + "gguf:\n  arch: a\n  class: B\n  tensors: {attn_q: q_proj}\n"},
			`descriptors/b.yaml:5: gguf.arch: "a" is a's GGUF architecture already`},
		{"wrapper without its section", map[string]string{"descriptors/a.yaml": base, "descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  runs: a\n"},
			`descriptors/w.yaml:4: wrapper.section: missing (required): the config key holding the text model's config`},
		{"wrapper without runs", map[string]string{"descriptors/a.yaml": base, "descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n"},
			`descriptors/w.yaml:4: wrapper.runs: missing (required): the model_type whose architecture runs the text model`},
		{"wrapper of a missing arch", map[string]string{"descriptors/a.yaml": base, "descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: llama\n"},
			`descriptors/w.yaml:5: wrapper.runs: no descriptor for "llama"`},
		{"wrapper that dispatches to a wrapper", map[string]string{"descriptors/a.yaml": base,
			"descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: a\n  dispatch: {x: w}\n"},
			`descriptors/w.yaml:6: wrapper.dispatch.x: "w" is a wrapper itself`},
		{"wrapper with a network", map[string]string{"descriptors/a.yaml": base,
			"descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: a\nstructure:\n  block: sandwich\n"},
			`descriptors/w.yaml:7: structure.block: a wrapper has no structure: the architecture it runs (wrapper.runs) has`},
		{"wrapper that extends", map[string]string{"descriptors/a.yaml": base,
			"descriptors/w.yaml": "model_type: w\ndoc: W.\nextends: a\nwrapper:\n  section: text_config\n  runs: a\n"},
			`descriptors/w.yaml:3: extends: a wrapper extends nothing: its text model's architecture is wrapper.runs`},
		{"wrapper prefix without from", map[string]string{"descriptors/a.yaml": base,
			"descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: a\n  prefixes: [{to: model.}]\n"},
			`descriptors/w.yaml:6: wrapper.prefixes[0]: needs from (not empty) and to`},
		{"wrapper value set or defaulted to null", map[string]string{"descriptors/a.yaml": base,
			"descriptors/w.yaml": "model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: a\n  set: {tie_word_embeddings: null}\n"},
			`descriptors/w.yaml:6: wrapper.set.tie_word_embeddings: want a value`},
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

// frag is a fragment file named name with more lines.
func frag(name, more string) string {
	return "fragment: " + name + "\ndoc: A fragment.\n" + more
}

// TestInheritedIgnore: a descriptor that reads a key its base ignores
// takes it off the inherited ignore list (without that, the key would be
// both read and ignored); a sibling that does not read it keeps it
// ignored, and an ignore list of its own adds to the base's.
func TestInheritedIgnore(t *testing.T) {
	a := strings.Replace(base, "structure:", "  ignore: [attention_bias, pad_token_id]\nstructure:", 1)
	reads := child + "config:\n  keys:\n    attention_bias: {type: bool, default: false}\n  ignore: [use_cache]\n"
	keeps := strings.Replace(child, "model_type: b", "model_type: c", 1)
	set, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(a), "descriptors/b.yaml": []byte(reads), "descriptors/c.yaml": []byte(keeps)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"a": {"attention_bias", "pad_token_id"}, "b": {"pad_token_id", "use_cache"}, "c": {"attention_bias", "pad_token_id"}}
	for _, arch := range set.Archs {
		if got := strings.Join(arch.Ignored, " "); got != strings.Join(want[arch.Name], " ") {
			t.Errorf("%s ignores %q, want %q", arch.Name, got, want[arch.Name])
		}
	}
}
