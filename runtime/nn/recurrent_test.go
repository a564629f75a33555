package nn_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// hybridDir is a float32 checkpoint of a hybrid of attention and gated
// delta layers (mlx-lm's, from the parity references: layers 0 and 2
// recurrent, 1 and 3 attention).
const hybridDir = "../../testdata/parity/qwen3_next/base/model"

// hybridDirs are float32 checkpoints of each recurrent mixer kind beside
// attention (mlx-lm's, from the parity references): gated delta (above),
// the state-space scan under a mixture of experts and under dense blocks,
// in single-sublayer layers, alone (no attention, no feed-forward), and
// beside attention in every layer (a list of two caches a layer); and the
// gated delta rule with three convolutions, in layers wired unlike the
// attention layers; and Mamba's selective scan, a step at a time; and
// Griffin's gated linear recurrence beside attention within a window of 6
// (shorter than the prompts); and the state-space scan whose B, C and time
// steps come from projections of their own, beside offset-normed
// attention; and attention whose keys and values are convolved over time
// (a state beside each layer's keys and values, windows on some layers); and
// RWKV-7's time mix, its channel mix keeping state in the same cache and
// the first layer's values carried to the others; and lightning attention
// (its rope from the state cache's offset) beside attention and experts.
var hybridDirs = []string{
	hybridDir,
	"../../testdata/parity/granitemoehybrid/moe_nope/model",
	"../../testdata/parity/granitemoehybrid/dense_rope/model",
	"../../testdata/parity/nemotron_h/pattern_moe/model",
	"../../testdata/parity/mamba2/tied_groups/model",
	"../../testdata/parity/falcon_h1/norm_after_gate/model",
	"../../testdata/parity/olmo_hybrid/default_pattern/model",
	"../../testdata/parity/mamba/untied_biased/model",
	"../../testdata/parity/jamba/moe_periods/model",
	"../../testdata/parity/plamo2/step3_mqa_untied/model",
	"../../testdata/parity/baichuan_m1/swa_heads/model",
	"../../testdata/parity/recurrent_gemma/griffin_tied/model",
	"../../testdata/parity/recurrent_gemma/attention_first_untied/model",
	"../../testdata/parity/rwkv7/heads32_tied/model",
	"../../testdata/parity/bailing_moe_linear/softmax_groups/model",
}

// eachHybrid runs f on each of hybridDirs' models, as a subtest.
func eachHybrid(t *testing.T, f func(t *testing.T, m nn.Model)) {
	for _, dir := range hybridDirs {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(dir)))+"/"+filepath.Base(filepath.Dir(dir)), func(t *testing.T) {
			f(t, loadHybrid(t, dir))
		})
	}
}

func loadHybrid(t *testing.T, dir string) nn.Model {
	t.Helper()
	m, err := registry.Load(dir, nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	return m
}

// hybridPrompt is a fixed sequence of in-vocabulary ids.
func hybridPrompt(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*37 + 11) % 200)
	}
	return ids
}

// logitsOf runs ids through m over caches, in pieces split at the given
// positions, and returns every position's logits.
func logitsOf(t *testing.T, m nn.Model, caches []kv.Cache, ids []int32, splits ...int) []float32 {
	t.Helper()
	var out []float32
	start := 0
	for _, end := range append(splits, len(ids)) {
		g := mlx.NewGraph(nil)
		logits := m.Forward(g, mlx.FromSlice(g, ids[start:end], 1, end-start), caches)
		if err := g.Eval(logits); err != nil {
			g.Close()
			t.Fatalf("tokens %d..%d: %v", start, end, err)
		}
		v, err := logits.Float32s()
		g.Close()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v...)
		start = end
	}
	return out
}

func largestDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestHybridSplitPrefill: a prompt run in pieces split anywhere (inside
// the convolutions' windows of 2 or 3 past inputs, at one token,
// mid-prompt)
// gives the logits of one pass, and the caches then hold every token.
func TestHybridSplitPrefill(t *testing.T) {
	eachHybrid(t, splitPrefill)
}

func splitPrefill(t *testing.T, m nn.Model) {
	ids := hybridPrompt(24)
	whole := logitsOf(t, m, m.NewCaches(), ids)
	// Pieces of one or two tokens run their products on decode's kernels,
	// which sum in another order than a prompt's: float32 rounding, which
	// grows with the logits' size.
	tol := 1e-4
	for _, v := range whole {
		tol = max(tol, 2e-5*math.Abs(float64(v)))
	}
	for _, splits := range [][]int{{1}, {2}, {3}, {1, 2, 3, 4}, {5, 17}, {23}} {
		caches := m.NewCaches()
		got := logitsOf(t, m, caches, ids, splits...)
		if d := largestDiff(got, whole); d > tol {
			t.Errorf("split at %v: logits differ from one pass by %g", splits, d)
		}
		for i, c := range caches {
			if c.Offset() != len(ids) {
				t.Errorf("split at %v: cache %d has seen %d tokens, want %d", splits, i, c.Offset(), len(ids))
			}
			c.Free()
		}
	}
}

// TestHybridSaveLoadContinue: caches saved after a prompt and loaded back
// (state slots and keys and values in one file) continue as the caches
// that were never saved.
func TestHybridSaveLoadContinue(t *testing.T) {
	eachHybrid(t, saveLoadContinue)
}

func saveLoadContinue(t *testing.T, m nn.Model) {
	ids := hybridPrompt(20)
	caches := m.NewCaches()
	logitsOf(t, m, caches, ids[:14])
	path := filepath.Join(t.TempDir(), "cache.safetensors")
	if err := kv.Save(path, caches, nil); err != nil {
		t.Fatal(err)
	}
	loaded, _, err := kv.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range caches {
		if got, want := fmt.Sprintf("%T", loaded[i]), fmt.Sprintf("%T", caches[i]); got != want {
			t.Fatalf("layer %d's cache loaded as a %s, want a %s", i, got, want)
		}
	}
	want := logitsOf(t, m, caches, ids[14:], 1, 2)
	got := logitsOf(t, m, loaded, ids[14:], 1, 2)
	if d := largestDiff(got, want); d != 0 {
		t.Errorf("after loading, the logits differ by %g", d)
	}
}

// TestHybridWrongCaches: a recurrent layer handed an attention cache, and
// an attention layer handed a state cache, fail the step with errors
// naming the problem; nothing panics.
func TestHybridWrongCaches(t *testing.T) {
	ids := hybridPrompt(4)
	for _, c := range []struct {
		name  string
		dir   string
		cache func() kv.Cache
		want  string
	}{
		{"attention caches", hybridDir, func() kv.Cache { return kv.NewPlain() }, "nn: a recurrent layer needs a state cache of 2 slots, got *kv.Plain (make the caches with the model's NewCaches)"},
		{"state caches", hybridDir, func() kv.Cache { return kv.NewStates(2) }, "kv: this layer's cache is a recurrent state (States), which makes no attention mask"},
		{"attention caches beside a scan", "../../testdata/parity/falcon_h1/tied_defaults/model", func() kv.Cache { return kv.NewPlain() }, "nn: a layer of two token mixers needs a list of two caches, got *kv.Plain (make the caches with the model's NewCaches)"},
		{"plain caches for convolved keys", "../../testdata/parity/baichuan_m1/swa_heads/model", func() kv.Cache { return kv.NewPlain() }, "nn: attention with a convolution of its keys and values needs a list of a state and an attention cache, got *kv.Plain (make the caches with the model's NewCaches)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := loadHybrid(t, c.dir)
			caches := make([]kv.Cache, len(m.NewCaches()))
			for i := range caches {
				caches[i] = c.cache()
			}
			g := mlx.NewGraph(nil)
			defer g.Close()
			err := g.Eval(m.Forward(g, mlx.FromSlice(g, ids, 1, len(ids)), caches))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestHybridHuggingFaceLayout: a checkpoint in Hugging Face's form (the
// convolutions [channels, 1, taps], experts one tensor each, the layer, q,
// k and final norms centred on zero) loads to the same model as mlx-lm's
// layout ([channels, taps, 1], experts stacked, norms as used).
func TestHybridHuggingFaceLayout(t *testing.T) {
	tensors, meta, err := mlx.LoadSafetensors(filepath.Join(hybridDir, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	moved, unstacked, centred := 0, 0, 0
	for name, a := range tensors {
		switch {
		case strings.HasSuffix(name, "conv1d.weight"):
			tensors[name] = g.Contiguous(g.Transpose(a, 0, 2, 1))
			moved++
		case strings.Contains(name, ".mlp.switch_mlp."):
			delete(tensors, name)
			for e := range a.Dim(0) {
				tensors[strings.Replace(name, ".switch_mlp.", fmt.Sprintf(".experts.%d.", e), 1)] =
					g.Contiguous(g.Reshape(g.Slice(a, []int{e, 0, 0}, []int{e + 1, a.Dim(1), a.Dim(2)}), a.Dim(1), a.Dim(2)))
			}
			unstacked++
		case a.Ndim() == 1 && (strings.HasSuffix(name, "layernorm.weight") || strings.HasSuffix(name, "q_norm.weight") ||
			strings.HasSuffix(name, "k_norm.weight") || name == "model.norm.weight"):
			tensors[name] = g.AddScalar(a, -1)
			centred++
		}
	}
	if moved == 0 || unstacked == 0 || centred == 0 {
		t.Fatalf("%d convolutions, %d stacked experts, %d norms in the checkpoint", moved, unstacked, centred)
	}
	sameModel(t, hybridDir, tensors, meta)
}

// TestStateSpaceHuggingFaceLayout: Granite 4.0-H checkpoints in Hugging
// Face's form (the convolutions [channels, 1, taps]; the experts stacked
// with gate and up fused, input_linear and output_linear; a dense layer's
// MLP stored as the fused shared expert, shared_mlp) load to the same
// models as mlx-lm's layout.
func TestStateSpaceHuggingFaceLayout(t *testing.T) {
	for _, dir := range hybridDirs[1:3] { // the granitemoehybrid ones
		t.Run(filepath.Base(filepath.Dir(dir)), func(t *testing.T) {
			tensors, meta, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
			if err != nil {
				t.Fatal(err)
			}
			g := mlx.NewGraph(nil)
			defer g.Close()
			fuse := func(gate, up, down, to string, axis int) {
				tensors[to+".input_linear.weight"] = g.Concatenate(axis, tensors[gate], tensors[up])
				tensors[to+".output_linear.weight"] = tensors[down]
				delete(tensors, gate)
				delete(tensors, up)
				delete(tensors, down)
			}
			moved, fused := 0, 0
			for name, a := range tensors {
				if strings.HasSuffix(name, "conv1d.weight") {
					tensors[name] = g.Contiguous(g.Transpose(a, 0, 2, 1))
					moved++
				}
			}
			for l := range 4 {
				p := fmt.Sprintf("model.layers.%d.", l)
				if _, ok := tensors[p+"mlp.gate_proj.weight"]; ok {
					fuse(p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight", p+"mlp.down_proj.weight", p+"shared_mlp", 0)
					fused++
				}
				sw := p + "block_sparse_moe.switch_mlp."
				if _, ok := tensors[sw+"gate_proj.weight"]; ok {
					fuse(sw+"gate_proj.weight", sw+"up_proj.weight", sw+"down_proj.weight", p+"block_sparse_moe", 1)
					fused++
				}
			}
			if moved == 0 || fused == 0 {
				t.Fatalf("%d convolutions, %d feed-forward blocks in the checkpoint", moved, fused)
			}
			sameModel(t, dir, tensors, meta)
		})
	}
}

// TestSingleBlockHuggingFaceLayout: a Nemotron-H checkpoint in Hugging
// Face's form (the convolutions [channels, 1, taps], experts one tensor
// each under their up_proj and down_proj names, a multi-token-prediction
// head beside the model) loads to the same model as mlx-lm's layout.
func TestSingleBlockHuggingFaceLayout(t *testing.T) {
	dir := "../../testdata/parity/nemotron_h/pattern_moe/model"
	tensors, meta, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	moved, unstacked := 0, 0
	for name, a := range tensors {
		switch {
		case strings.HasSuffix(name, "conv1d.weight"):
			tensors[name] = g.Contiguous(g.Transpose(a, 0, 2, 1))
			moved++
		case strings.Contains(name, ".switch_mlp.fc"):
			delete(tensors, name)
			hf := map[string]string{"fc1": "up_proj", "fc2": "down_proj"}[strings.TrimSuffix(name[strings.LastIndex(name, ".fc")+1:], ".weight")]
			for e := range a.Dim(0) {
				expert := name[:strings.Index(name, ".switch_mlp.")] + fmt.Sprintf(".experts.%d.%s.weight", e, hf)
				tensors[expert] = g.Contiguous(g.Reshape(g.Slice(a, []int{e, 0, 0}, []int{e + 1, a.Dim(1), a.Dim(2)}), a.Dim(1), a.Dim(2)))
			}
			unstacked++
		}
	}
	tensors["mtp.layers.0.norm.weight"] = g.Ones([]int{4}, mlx.Float32)
	if moved == 0 || unstacked == 0 {
		t.Fatalf("%d convolutions, %d stacked experts in the checkpoint", moved, unstacked)
	}
	sameModel(t, dir, tensors, meta)
}

// TestRenamedExpertsHuggingFaceLayout: an LFM2-MoE checkpoint in Hugging
// Face's form (projections named w1, w3 and w2, experts one tensor each,
// the convolutions [channels, 1, taps]) loads to the same model as
// mlx-lm's layout.
func TestRenamedExpertsHuggingFaceLayout(t *testing.T) {
	dir := "../../testdata/parity/lfm2_moe/base/model"
	tensors, meta, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	hf := strings.NewReplacer("gate_proj.weight", "w1.weight", "up_proj.weight", "w3.weight", "down_proj.weight", "w2.weight")
	out := map[string]*mlx.Array{}
	renamed, unstacked, moved := 0, 0, 0
	for name, a := range tensors {
		switch {
		case strings.HasSuffix(name, "conv.weight") && a.Ndim() == 3:
			a = g.Contiguous(g.Transpose(a, 0, 2, 1))
			moved++
		case strings.Contains(name, ".switch_mlp."):
			for e := range a.Dim(0) {
				expert := hf.Replace(strings.Replace(name, ".switch_mlp.", fmt.Sprintf(".experts.%d.", e), 1))
				out[expert] = g.Contiguous(g.Reshape(g.Slice(a, []int{e, 0, 0}, []int{e + 1, a.Dim(1), a.Dim(2)}), a.Dim(1), a.Dim(2)))
			}
			unstacked++
			continue
		}
		if r := hf.Replace(name); r != name {
			name = r
			renamed++
		}
		out[name] = a
	}
	if renamed == 0 || unstacked == 0 || moved == 0 {
		t.Fatalf("%d renamed, %d stacked experts, %d convolutions in the checkpoint", renamed, unstacked, moved)
	}
	sameModel(t, dir, out, meta)

	// One tensor under both names fails the load, naming both.
	out["model.layers.0.feed_forward.gate_proj.weight"] = out["model.layers.0.feed_forward.w1.weight"]
	both := t.TempDir()
	if err := mlx.SaveSafetensors(filepath.Join(both, "model.safetensors"), out, meta); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(both, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = registry.Load(both, nn.Options{})
	want := "model.layers.0.feed_forward.w1.weight and model.layers.0.feed_forward.gate_proj.weight: the checkpoint holds one tensor under both names"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want it to contain %q", err, want)
	}
}

// sameModel writes tensors (and meta) beside src's config.json in a new
// directory and checks that it loads to src's model: equal logits, bit for
// bit.
func sameModel(t *testing.T, src string, tensors map[string]*mlx.Array, meta map[string]string) {
	t.Helper()
	dir := t.TempDir()
	if err := mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), tensors, meta); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ids := hybridPrompt(9)
	a := loadHybrid(t, src)
	b := loadHybrid(t, dir)
	if d := largestDiff(logitsOf(t, b, b.NewCaches(), ids), logitsOf(t, a, a.NewCaches(), ids)); d != 0 {
		t.Errorf("the Hugging Face layout's logits differ by %g", d)
	}
}

// TestOneMixer: two mixer kinds claiming one layer is an error naming the
// layer and the kinds.
func TestOneMixer(t *testing.T) {
	if err := nn.OneMixer(3, "GatedDelta, ShortConv", []bool{true, false}); err != nil {
		t.Fatal(err)
	}
	err := nn.OneMixer(3, "GatedDelta, ShortConv", []bool{true, true})
	want := "layer 3: more than one token mixer claims it (of GatedDelta, ShortConv, 2 do): the config's layer pattern is inconsistent"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestWrappedHybridHuggingFaceLayout: a Qwen3.5-MoE checkpoint as Hugging
// Face publishes it (the text model under model.language_model., the head
// at lm_head, experts stacked with gate and up fused and no .weight suffix,
// the convolutions [channels, 1, taps], the layer, q, k and final norms
// centred on zero, beside a vision tower and a multi-token-prediction
// layer) loads to the same model as mlx-lm's saved layout.
func TestWrappedHybridHuggingFaceLayout(t *testing.T) {
	const src = "../../testdata/parity/qwen3_5_moe/text_config/model"
	tensors, meta, err := mlx.LoadSafetensors(filepath.Join(src, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	out := map[string]*mlx.Array{}
	fused := map[string][2]*mlx.Array{} // gate and up, by layer prefix
	for name, a := range tensors {
		hf, ok := strings.CutPrefix(name, "language_model.model.")
		switch {
		case ok:
			hf = "model.language_model." + hf
		case name == "language_model.lm_head.weight":
			hf = "lm_head.weight"
		default:
			t.Fatalf("unexpected tensor %s", name)
		}
		switch {
		case strings.HasSuffix(hf, "conv1d.weight"):
			a = g.Contiguous(g.Transpose(a, 0, 2, 1))
		case a.Ndim() == 1 && (strings.HasSuffix(hf, "layernorm.weight") || strings.HasSuffix(hf, "q_norm.weight") ||
			strings.HasSuffix(hf, "k_norm.weight") || hf == "model.language_model.norm.weight"):
			a = g.AddScalar(a, -1)
		case strings.HasSuffix(hf, ".switch_mlp.gate_proj.weight"), strings.HasSuffix(hf, ".switch_mlp.up_proj.weight"):
			layer, _, _ := strings.Cut(hf, ".switch_mlp.")
			pair := fused[layer]
			pair[btoi(strings.HasSuffix(hf, "up_proj.weight"))] = a
			fused[layer] = pair
			continue
		case strings.HasSuffix(hf, ".switch_mlp.down_proj.weight"):
			hf = strings.Replace(hf, ".switch_mlp.down_proj.weight", ".experts.down_proj", 1)
		}
		out[hf] = a
	}
	if len(fused) == 0 {
		t.Fatal("no experts in the checkpoint")
	}
	for layer, pair := range fused {
		out[layer+".experts.gate_up_proj"] = g.Concatenate(1, pair[0], pair[1])
	}
	out["model.visual.blocks.0.attn.qkv.weight"] = g.Zeros([]int{4, 4}, mlx.Float32)
	out["mtp.layers.0.input_layernorm.weight"] = g.Zeros([]int{64}, mlx.Float32)
	sameModel(t, src, out, meta)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFoldFaults: a Falcon-H1 checkpoint in Hugging Face's form whose
// multipliers cannot fold fails the load naming the tensor: one whose rows
// do not match the config's blocks, one that is not floating point.
func TestFoldFaults(t *testing.T) {
	src := "../../testdata/parity/falcon_h1/hf_layout_norm_before_gate/model"
	tensors, meta, err := mlx.LoadSafetensors(filepath.Join(src, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	load := func(tensors map[string]*mlx.Array, cfg []byte) error {
		dir := t.TempDir()
		if err := mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), tensors, meta); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := registry.Load(dir, nn.Options{})
		if err == nil {
			m.Free()
		}
		return err
	}
	in := "model.layers.0.mamba.in_proj.weight"
	rows := tensors[in].Dim(0)
	short := map[string]*mlx.Array{}
	for k, v := range tensors {
		short[k] = v
	}
	short[in] = g.Contiguous(g.Slice(tensors[in], []int{0, 0}, []int{rows - 1, tensors[in].Dim(1)}))
	err = load(short, cfg)
	want := fmt.Sprintf("%s: shape [%d %d], want %d rows (the blocks its multipliers fold into)", in, rows-1, tensors[in].Dim(1), rows)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("rows: error %v, want it to contain %q", err, want)
	}
	ints := map[string]*mlx.Array{}
	for k, v := range tensors {
		ints[k] = v
	}
	ints["model.embed_tokens.weight"] = g.AsType(tensors["model.embed_tokens.weight"], mlx.Int32)
	err = load(ints, cfg)
	want = "model.embed_tokens.weight: dtype int32: a multiplier folds into unquantized weights only (this checkpoint keeps its multipliers apart)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("dtype: error %v, want it to contain %q", err, want)
	}
}
