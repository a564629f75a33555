package parity

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// moeBlocks are the sparse blocks of a loaded model, found by walking its
// layers: every nn.MoE field with experts (the dense layers' are empty).
func moeBlocks(m any) []*nn.MoE {
	var out []*nn.MoE
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			if v.Type() == reflect.TypeOf(nn.MoE{}) {
				if b := v.Addr().Interface().(*nn.MoE); b.Experts != nil {
					out = append(out, b)
				}
				return
			}
			for i := 0; i < v.NumField(); i++ {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Slice:
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		case reflect.Pointer:
			// a layer's modules held by pointer (a single block's MLP)
			if !v.IsNil() && v.Elem().Kind() == reflect.Struct && v.Type().Elem().PkgPath() == reflect.ValueOf(m).Elem().Type().PkgPath() {
				walk(v.Elem())
			}
		}
	}
	walk(reflect.ValueOf(m).Elem())
	return out
}

// TestExpertsHit checks that the MoE cases route the prompt over the
// experts, not to a few: in each sparse layer of each case's float32
// checkpoint, at least three quarters of the experts are picked, and no
// expert takes half the picks.
func TestExpertsHit(t *testing.T) {
	refsDir, models, idx := derived(t)
	cases := 0
	for _, c := range idx.Cases {
		refs, err := LoadRefs(refsDir, c)
		if err != nil {
			t.Fatal(err)
		}
		m, err := registry.Load(LevelDir(models, c, "float32"), nn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		blocks := moeBlocks(m)
		if len(blocks) == 0 {
			m.Free()
			continue
		}
		cases++
		for _, b := range blocks {
			b.Hits = &nn.ExpertHits{}
		}
		if _, _, err := Prefill(m, refs.Prompt); err != nil {
			t.Fatalf("%s: %v", c.Key(), err)
		}
		for i, b := range blocks {
			if err := b.Hits.Count(); err != nil {
				t.Fatalf("%s: %v", c.Key(), err)
			}
			experts, picks := b.Experts.Up.Weight.Dim(0), len(refs.Prompt)*b.Router.K
			most := 0
			for _, n := range b.Hits.Counts {
				most = max(most, n)
			}
			t.Logf("%s sparse block %d: %d of %d experts hit, the busiest %d of %d picks", c.Key(), i, len(b.Hits.Counts), experts, most, picks)
			if 4*len(b.Hits.Counts) < 3*experts || 2*most >= picks {
				t.Errorf("%s sparse block %d: %d of %d experts hit, the busiest %d of %d picks: the routing does not spread", c.Key(), i, len(b.Hits.Counts), experts, most, picks)
			}
		}
		m.Free()
	}
	if cases == 0 {
		t.Fatal("no case has a sparse block")
	}
}

// unstack writes dir's checkpoint into out in Hugging Face's per-expert
// layout: each stacked <mlp>.<stacked>.<proj>.<suffix> [E, ...] becomes E
// tensors <mlp>.<perExpert>.<e>.<hfProj>.<suffix>. edit, when set, may
// change the tensors before they are saved.
func unstack(t *testing.T, dir, out, stacked, perExpert string, rename map[string]string, edit func(g *mlx.Graph, ts map[string]*mlx.Array)) {
	t.Helper()
	ts, _, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	re := regexp.MustCompile(`^(.*)\.` + regexp.QuoteMeta(stacked) + `\.([a-z_0-9]+)\.(weight|scales|biases|bias)$`)
	split := map[string]*mlx.Array{}
	for name, a := range ts {
		p := re.FindStringSubmatch(name)
		if p == nil {
			split[name] = a
			continue
		}
		proj := p[2]
		if r, ok := rename[proj]; ok {
			proj = r
		}
		shape := a.Shape()
		for e := 0; e < shape[0]; e++ {
			start := make([]int, len(shape))
			stop := slices.Clone(shape)
			start[0], stop[0] = e, e+1
			split[fmt.Sprintf("%s.%s.%d.%s.%s", p[1], perExpert, e, proj, p[3])] = g.Squeeze(g.Slice(a, start, stop), 0)
		}
	}
	if edit != nil {
		edit(g, split)
	}
	saveBeside(t, dir, out, split)
	for _, a := range ts {
		a.Free()
	}
}

// saveBeside writes tensors into out as a checkpoint, with dir's
// config.json.
func saveBeside(t *testing.T, dir, out string, tensors map[string]*mlx.Array) {
	t.Helper()
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mlx.SaveSafetensors(filepath.Join(out, "model.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
}

// prefillDir is the prefill logits of the checkpoint in dir on prompt, at
// the default compute dtype.
func prefillDir(t *testing.T, dir string, prompt []int32) []float32 {
	t.Helper()
	return prefillDirAt(t, dir, prompt, nn.Options{})
}

// prefillDirAt is prefillDir loaded with opts.
func prefillDirAt(t *testing.T, dir string, prompt []int32, opts nn.Options) []float32 {
	t.Helper()
	m, err := registry.Load(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	logits, _, err := Prefill(m, prompt)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// TestExpertsPerExpertLayout loads checkpoints in Hugging Face's
// per-expert layout (each expert's projections apart, under their own
// names; the quantized level's scales and biases apart too), made from the
// parity checkpoints, and checks their prefill logits equal those of the
// stacked checkpoints bit for bit; and it checks the errors of a missing
// expert and of experts of two shapes.
func TestExpertsPerExpertLayout(t *testing.T) {
	_, models, _ := derived(t)
	for _, x := range []struct {
		arch, cas, level string
		mlp              string
		rename           map[string]string
	}{
		{"qwen3_moe", "base", "float32", "mlp", nil},
		{"qwen3_moe", "base", "q4_g64", "mlp", nil},
		{"mixtral", "base", "float32", "block_sparse_moe", map[string]string{"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}},
		{"olmoe", "bias_renorm_tied", "q8_g32", "mlp", nil},
	} {
		t.Run(x.arch+"/"+x.cas+"/"+x.level, func(t *testing.T) {
			perExpertMatches(t, models, x.arch, x.cas, x.level, x.rename)
		})
	}
	// granitemoe's Hugging Face layout: the experts stacked already, gate
	// and up fused in input_linear, down in output_linear.
	t.Run("granitemoe/base/float32 fused", func(t *testing.T) {
		c := CaseInfo{Arch: "granitemoe", Case: "base"}
		dir := LevelDir(models, c, "float32")
		refs, err := LoadRefs(RefsDir(), c)
		if err != nil {
			t.Fatal(err)
		}
		ts, _, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
		if err != nil {
			t.Fatal(err)
		}
		g := mlx.NewGraph(nil)
		defer g.Close()
		out := map[string]*mlx.Array{}
		for name, a := range ts {
			switch {
			case strings.HasSuffix(name, ".switch_mlp.gate_proj.weight"):
				p := strings.TrimSuffix(name, ".switch_mlp.gate_proj.weight")
				out[p+".input_linear.weight"] = g.Concatenate(1, a, ts[p+".switch_mlp.up_proj.weight"])
			case strings.HasSuffix(name, ".switch_mlp.up_proj.weight"):
			case strings.HasSuffix(name, ".switch_mlp.down_proj.weight"):
				out[strings.TrimSuffix(name, ".switch_mlp.down_proj.weight")+".output_linear.weight"] = a
			default:
				out[name] = a
			}
		}
		hf := filepath.Join(t.TempDir(), "hf")
		saveBeside(t, dir, hf, out)
		for _, a := range ts {
			a.Free()
		}
		if !slices.Equal(prefillDir(t, hf, refs.Prompt), prefillDir(t, dir, refs.Prompt)) {
			t.Fatal("the fused checkpoint's logits differ from the stacked one's")
		}
	})
	// The errors, on qwen3_moe/base (8 experts; layer 0 sparse).
	c := CaseInfo{Arch: "qwen3_moe", Case: "base"}
	dir := LevelDir(models, c, "float32")
	for _, x := range []struct {
		name string
		edit func(g *mlx.Graph, ts map[string]*mlx.Array)
		want string
	}{
		{"missing expert", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			delete(ts, "model.layers.0.mlp.experts.3.up_proj.weight")
		}, "layer 0: missing mlp.experts.3.up_proj.weight (expert 3 of 8)"},
		{"mismatched expert", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			a := ts["model.layers.2.mlp.experts.5.down_proj.weight"]
			ts["model.layers.2.mlp.experts.5.down_proj.weight"] = g.Slice(a, []int{0, 0}, []int{a.Dim(0), a.Dim(1) - 32})
		}, "layer 2: mlp.experts.5.down_proj.weight: float32 [64 32], but expert 0's is float32 [64 64]: experts must have one shape"},
		{"an expert too many", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			ts["model.layers.3.mlp.experts.8.gate_proj.weight"] = ts["model.layers.3.mlp.experts.0.gate_proj.weight"]
		}, "layer 3: unexpected mlp.experts.8.gate_proj.weight: the config has 8 experts"},
	} {
		t.Run(x.name, func(t *testing.T) {
			hf := filepath.Join(t.TempDir(), "hf")
			unstack(t, dir, hf, "switch_mlp", "experts", nil, x.edit)
			_, err := registry.Load(hf, nn.Options{})
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), x.want) {
				t.Fatalf("error %q, want it to hold %q", err, x.want)
			}
		})
	}
}

// TestTopKOverExperts: a config that routes each token to more experts
// than there are is refused, naming the key.
func TestTopKOverExperts(t *testing.T) {
	for _, x := range []struct{ config, want string }{
		{`{"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 6, "decoder_sparse_step": 1, "mlp_only_layers": [], "moe_intermediate_size": 64, "rms_norm_eps": 1e-06, "vocab_size": 128, "rope_theta": 1000000.0, "tie_word_embeddings": false, "max_position_embeddings": 4096, "norm_topk_prob": true}`,
			"num_experts_per_tok: must not exceed num_experts"},
		{`{"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 5}`,
			"num_experts_per_tok: must not exceed num_local_experts"},
		{`{"model_type": "olmoe", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 64, "num_attention_heads": 4, "rms_norm_eps": 1e-05, "vocab_size": 128, "num_experts": 8, "num_experts_per_tok": 9}`,
			"num_experts_per_tok: must not exceed num_experts"},
		{`{"model_type": "deepseek", "n_routed_experts": 4, "num_experts_per_tok": 6}`,
			"num_experts_per_tok: must not exceed n_routed_experts"},
		{`{"model_type": "gpt_oss", "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 8}`,
			"num_experts_per_tok: must not exceed num_local_experts"},
	} {
		a, err := registry.Lookup(modelType(t, x.config))
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Config([]byte(x.config))
		if err == nil || err.Error() != x.want {
			t.Errorf("%s: error %v, want %q", a.Name, err, x.want)
		}
	}
}

func modelType(t *testing.T, config string) string {
	t.Helper()
	m := regexp.MustCompile(`"model_type": "([a-z0-9_]+)"`).FindStringSubmatch(config)
	if m == nil {
		t.Fatal("no model_type")
	}
	return m[1]
}
