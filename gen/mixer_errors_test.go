package gen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hybridBase is base with the keys a gated_delta mixer reads and every
// other layer claimed by it.
var hybridBase = strings.Replace(strings.Replace(base, "    vocab_size: {type: int, required: true}\n",
	"    vocab_size: {type: int, required: true}\n"+
		"    linear_num_key_heads: {type: int, required: true, min: 1}\n"+
		"    linear_num_value_heads: {type: int, required: true, min: 1}\n"+
		"    linear_key_head_dim: {type: int, required: true, min: 1}\n"+
		"    linear_value_head_dim: {type: int, required: true, min: 1}\n"+
		"    linear_conv_kernel_dim: {type: int, required: true, min: 1}\n", 1),
	"structure:\n", "structure:\n  mixers:\n    gated_delta:\n      layers: \"i % 2 == 0\"\n", 1)

// TestMixerDescriptorErrors: the bad descriptors of token mixers and the
// attention output gate, each with its exact message.
func TestMixerDescriptorErrors(t *testing.T) {
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(hybridBase)}); err != nil {
		t.Fatalf("hybridBase: %v", err)
	}
	mixer := func(extra string) string {
		return strings.Replace(hybridBase, "      layers: \"i % 2 == 0\"\n", "      layers: \"i % 2 == 0\"\n"+extra, 1)
	}
	section := func(body string) string {
		return strings.Replace(hybridBase, "    gated_delta:\n      layers: \"i % 2 == 0\"\n", body, 1)
	}
	// ssd is an ssd section over literal sizes, with extra options.
	ssd := func(extra string) string {
		return "    ssd:\n      layers: \"i % 2 == 0\"\n      heads: \"4\"\n      head_dim: \"16\"\n      groups: \"1\"\n" +
			"      state_size: \"8\"\n      conv_kernel: \"4\"\n      conv_bias: \"false\"\n      bias: \"false\"\n" +
			"      dt_min: \"0.001\"\n      dt_max: \"100.0\"\n      norm_eps: rms_norm_eps\n" + extra
	}
	attn := func(yaml, extra string) string {
		return strings.Replace(yaml, "structure:\n", "structure:\n  attention:\n"+extra, 1)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown kind", section("    mamba9:\n      layers: \"i % 2 == 0\"\n"),
			"descriptors/a.yaml:21: structure.mixers.mamba9: unknown mixer kind (want one of gated_delta, lightning, mla, rg_lru, selective_scan, short_conv, ssd, wkv7)"},
		{"a module that is no name", section("    ssd:\n      layers: \"i % 2 == 0\"\n      module: \"Mamba Mixer\"\n"),
			`descriptors/a.yaml:23: structure.mixers.ssd.module: "Mamba Mixer" is not a module name (dotted lower-case words)`},
		{"unknown option", mixer("      heads: 4\n"),
			"descriptors/a.yaml:23: structure.mixers.gated_delta.heads: unknown key of a gated_delta mixer (want one of allow_neg_eigval, block, conv_kernel, key_dim, key_heads, layers, norm_eps, projections, tiled_heads, value_dim, value_heads)"},
		{"no layers", section("    gated_delta:\n      projections: grouped\n"),
			"descriptors/a.yaml:21: structure.mixers.gated_delta.layers: missing: which layers the gated_delta mixer mixes (a per-layer bool; attention takes the others)"},
		{"layers not a bool", section("    gated_delta:\n      layers: \"i + 1\"\n"),
			`descriptors/a.yaml:22: structure.mixers.gated_delta.layers: "i + 1" is int, want bool`},
		{"separate ssd without dt_rank", section(ssd("      projections: separate\n")),
			"descriptors/a.yaml:21: structure.mixers.ssd.dt_rank: missing: the separate layout's time-step input width (bcdt_proj's last part, dt_proj's input)"},
		{"dt_rank on the fused ssd", section(ssd("      dt_rank: \"64\"\n")),
			"descriptors/a.yaml:33: structure.mixers.ssd.dt_rank: only the separate layout (projections: separate) has a time-step input of its own"},
		{"separate ssd over groups", section(strings.Replace(ssd("      projections: separate\n      dt_rank: \"64\"\n"), `groups: "1"`, `groups: "2"`, 1)),
			"descriptors/a.yaml:25: structure.mixers.ssd.groups: the separate layout reads one group of B and C (its norms' weights are state_size wide): set it to 1"},
		{"kv_conv beside mixers", attn(hybridBase, "    kv_conv: \"2\"\n"),
			"descriptors/a.yaml:21: structure.attention.kv_conv: a convolution of keys and values beside other token mixers (structure.mixers) is not supported"},
		{"unknown projections", mixer("      projections: packed\n"),
			`descriptors/a.yaml:23: structure.mixers.gated_delta.projections: unknown "packed" (want one of grouped, flat, separate)`},
		{"a default with no key", strings.Replace(hybridBase, "    linear_conv_kernel_dim: {type: int, required: true, min: 1}\n", "", 1),
			`descriptors/a.yaml:20: structure.mixers.gated_delta.conv_kernel: unknown name "linear_conv_kernel_dim" (in the default "linear_conv_kernel_dim"; set it)`},
		{"an option of the wrong type", mixer("      key_dim: rms_norm_eps\n"),
			`descriptors/a.yaml:23: structure.mixers.gated_delta.key_dim: "rms_norm_eps" is float, want int`},
		{"sliding layers beside a kind that attends too", attn(section("    ssd:\n      layers: \"i % 2 == 0\"\n      heads: \"4\"\n      head_dim: \"16\"\n      groups: \"1\"\n"+
			"      state_size: \"8\"\n      conv_kernel: \"4\"\n      conv_bias: \"true\"\n      bias: \"false\"\n      dt_min: \"0.0\"\n      dt_max: \"inf\"\n      norm_eps: \"1.0e-5\"\n      with_attention: true\n"),
			"    sliding: \"i == 1\"\n    window: 4\n"),
			"descriptors/a.yaml:21: structure.attention.sliding: sliding-window layers beside a mixer kind that attends too (with_attention) are not supported"},
		{"feed-forward layers outside a single block", strings.Replace(hybridBase, "structure:\n", "structure:\n  feed_forward: \"i == 1\"\n", 1),
			"descriptors/a.yaml:20: structure.feed_forward: only a single block (block: single) has layers whose one sublayer is the feed-forward block"},
		{"a single block without mixers", strings.Replace(base, "structure:\n", "structure:\n  block: single\n", 1),
			"descriptors/a.yaml:15: structure.block: a single block's layers each hold one token mixer or the feed-forward block: it needs structure.mixers"},
		{"a single block clipping its sums", strings.Replace(hybridBase, "structure:\n", "structure:\n  block: single\n  clip_residual: true\n", 1),
			"descriptors/a.yaml:21: structure.clip_residual: a single block's residual sums are plain"},
		{"feed-forward layers not a bool", strings.Replace(hybridBase, "structure:\n", "structure:\n  block: single\n  feed_forward: \"i\"\n", 1),
			`descriptors/a.yaml:21: structure.feed_forward: "i" is int, want bool`},
		{"an unknown block for a kind", mixer("      block: parallel\n"),
			`descriptors/a.yaml:23: structure.mixers.gated_delta.block: unknown "parallel" (want one of same, pre_norm, post_norm, sandwich, four_norm)`},
		{"a kind's own block beside a parallel one", strings.Replace(mixer("      block: post_norm\n"), "structure:\n", "structure:\n  block: parallel\n", 1),
			"descriptors/a.yaml:20: structure.block: a mixer kind's own block (post_norm) beside a parallel block is not supported"},
		{"a token-shifted MLP without a state cache", strings.Replace(base, "kind: swiglu", "kind: shifted_relu2", 1),
			`descriptors/a.yaml:16: structure.mlp.kind: a shifted_relu2 MLP keeps the previous token in its layer's state cache: no token mixer keeps a state cache`},
		{"a token-shifted MLP beside attention layers", strings.Replace(hybridBase, "kind: swiglu", "kind: shifted_relu2", 1),
			`descriptors/a.yaml:24: structure.mlp.kind: a shifted_relu2 MLP keeps the previous token in its layer's state cache: every layer must be mixed by one kind that keeps a slot for it (wkv7, layers: "true")`},
		{"an embedding norm that is no name", strings.Replace(base, "structure:\n", "structure:\n  embed_norm: \"Pre Norm\"\n", 1),
			`descriptors/a.yaml:15: structure.embed_norm: "Pre Norm" is not a checkpoint name (dotted words or indices)`},
		{"a first layer that is no bool", section("    wkv7:\n      layers: \"true\"\n      head_dim: 16\n      decay_rank: 8\n      a_rank: 8\n      v_rank: 8\n      gate_rank: 8\n      first: \"i\"\n"),
			`descriptors/a.yaml:28: structure.mixers.wkv7.first: "i" is int, want bool`},
		{"a lightning decay factor that is no number", section("    lightning:\n      layers: \"i % 2 == 0\"\n      decay_factor: \"i == 0\"\n"),
			`descriptors/a.yaml:23: structure.mixers.lightning.decay_factor: "i == 0" is bool, want float`},
		{"an mla mixer without a rotating rope", strings.Replace(section("    mla:\n      layers: \"i % 2 == 0\"\n      q_rank: \"0\"\n      kv_rank: \"32\"\n      nope: \"16\"\n      rope: \"8\"\n      value: \"16\"\n      scale: \"0.2\"\n      bias: \"false\"\n"), "structure:\n", "structure:\n  rope:\n    kind: none\n", 1),
			`descriptors/a.yaml:23: structure.mixers.mla: an mla mixer rotates the queries' and keys' rope parts with the architecture's rope: structure.rope must rotate`},
		{"a lightning mixer without a rotating rope", strings.Replace(section("    lightning:\n      layers: \"i % 2 == 0\"\n"), "structure:\n", "structure:\n  rope:\n    kind: none\n", 1),
			`descriptors/a.yaml:23: structure.mixers.lightning: a lightning mixer rotates q and k with the architecture's rope: structure.rope must rotate`},
		{"a fused qkv with biases of its own", attn(base, "    fused_qkv: true\n    bias: {q: \"true\", k: \"false\", v: \"false\", o: \"false\"}\n"),
			`descriptors/a.yaml:16: structure.attention.fused_qkv: a fused qkv projection has one bias for q, k and v: their bias expressions must be the same`},
		{"an output gate on a fused qkv", attn(base, "    fused_qkv: true\n    output_gate: true\n"),
			"descriptors/a.yaml:17: structure.attention.output_gate: an output gate comes from q's own projection, not a fused qkv"},
		{"values from keys on a fused qkv", attn(base, "    fused_qkv: true\n    values_from_keys: \"i % 2 == 1\"\n"),
			"descriptors/a.yaml:17: structure.attention.values_from_keys: values taken from k's projection need separate projections, not a fused qkv"},
		{"values from keys that are no bool", attn(base, "    values_from_keys: \"i\"\n"),
			`descriptors/a.yaml:16: structure.attention.values_from_keys: "i" is int, want bool`},
		{"keys and values from another layer with a fused qkv", attn(base, "    fused_qkv: true\n    kv_from: \"i - 1\"\n"),
			"descriptors/a.yaml:17: structure.attention.kv_from: layers that read another layer's keys and values go with separate q, k and v projections and per_head norms, not a fused qkv projection"},
		{"per-layer inputs in a parallel block", strings.Replace(base, "structure:\n", "structure:\n  block: parallel\n  per_layer_inputs: {width: \"8\", vocab: vocab_size}\n", 1),
			"descriptors/a.yaml:16: structure.per_layer_inputs: a parallel block takes no per-layer inputs: that needs a block of attention then the MLP"},
		{"a negated scaled rope", strings.Replace(base, "structure:\n", "structure:\n  rope:\n    kind: scaled\n    scaling: rope_scaling\n    negate: true\n", 1),
			"descriptors/a.yaml:18: structure.rope.negate: a scaled rope does not turn the other way; only a plain one does"},
		{"an unknown value norm", attn(base, "    v_norm: rms\n"),
			`descriptors/a.yaml:16: structure.attention.v_norm: unknown value norm "rms" (want unweighted, or none)`},
		{"a layer scale in a parallel block", strings.Replace(base, "structure:\n", "structure:\n  block: parallel\n  layer_scale: layer_scalar\n", 1),
			"descriptors/a.yaml:16: structure.layer_scale: a parallel block takes no layer scale: that needs a block of attention then the MLP"},
		{"a rope_scaling default that is no object", strings.Replace(base, "    vocab_size: {type: int, required: true}\n", "    vocab_size: {type: int, required: true}\n    rope_scaling: {type: rope_scaling, default: linear}\n", 1),
			"descriptors/a.yaml:14: config.keys.rope_scaling.default: a rope_scaling key's default is an object of its settings, not linear"},
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

// TestMixerKindsDocumented: every registered mixer kind has its section
// in descriptors/README.md, and every such section a kind.
func TestMixerKindsDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "descriptors", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if k, ok := strings.CutPrefix(line, "#### mixer: "); ok {
			documented[k] = true
		}
	}
	for _, k := range mixerKindNames() {
		if !documented[k] {
			t.Errorf("mixer kind %s has no \"#### mixer: %s\" section in descriptors/README.md", k, k)
		}
		delete(documented, k)
	}
	for k := range documented {
		t.Errorf("descriptors/README.md documents mixer kind %s, which is not registered", k)
	}
}

// TestMixersBesideSlidingLayers: attention layers beside another mixer
// kind, some of them within a window: the attention branch of build marks
// the sliding ones and finds the first layer of each kind (either may be
// none), and Forward makes both masks from those layers' caches; the
// generated Go parses.
func TestMixersBesideSlidingLayers(t *testing.T) {
	yaml := strings.Replace(hybridBase, "structure:\n", "structure:\n  attention:\n    sliding: \"i % 4 == 1\"\n    window: 4\n", 1)
	set, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	files, err := Generate(set)
	if err != nil {
		t.Fatal(err)
	}
	model, forward := string(files["generated/a/model.go"]), string(files["generated/a/forward.go"])
	for _, want := range []string{
		"fullLayer:    -1,",
		"slidingLayer: -1,",
		"if i%4 == 1 {\n\t\t\t\tl.mask = 1\n\t\t\t\tm.caches[i].Window = m.window\n\t\t\t\tm.slidingLayer = nn.FirstLayer(m.slidingLayer, i)\n\t\t\t} else {\n\t\t\t\tm.fullLayer = nn.FirstLayer(m.fullLayer, i)\n\t\t\t}",
	} {
		if !strings.Contains(model, want) {
			t.Errorf("model.go lacks %q:\n%s", want, model)
		}
	}
	for _, bad := range []string{"attnLayer", "nn.MaskLayers"} {
		if strings.Contains(model, bad) {
			t.Errorf("model.go has %s beside sliding layers", bad)
		}
	}
	want := "masks := [2]mlx.AttentionMask{\n\t\tnn.LayerWindowMask(g, caches, m.fullLayer, L, 0, false),\n\t\tnn.LayerWindowMask(g, caches, m.slidingLayer, L, m.window, false),\n\t}"
	if !strings.Contains(forward, want) || !strings.Contains(forward, "masks[m.Layers[i].mask]") {
		t.Errorf("forward.go lacks the two masks:\n%s", forward)
	}
}
