package parity

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestFP8Checkpoint loads a per-tensor FP8 checkpoint (Ministral 3's
// layout: each projection's weight as F8_E4M3 codes beside a
// weight_scale_inv and an activation_scale) made from ministral3/base's
// float32 checkpoint with MLX's own to_fp8, and checks its prefill logits
// equal, bit for bit, those of a float32 checkpoint holding what MLX's
// from_fp8 makes of the same codes times the scales. mlx-lm cannot be the
// reference here: its sanitize multiplies the codes as loaded (uint8) by the
// scale, without reading them as FP8 (DeepSeek's tile layout is checked
// against mlx-lm in the parity matrix). It also checks the errors of a tile
// scale of the wrong shape, a scale without its weight, and a float weight
// beside a scale.
func TestFP8Checkpoint(t *testing.T) {
	_, models, _ := derived(t)
	c := CaseInfo{Arch: "ministral3", Case: "base"}
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
	proj := regexp.MustCompile(`^model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.weight$`)
	fp8, want := map[string]*mlx.Array{}, map[string]*mlx.Array{}
	var codes []string
	for name, a := range ts {
		if !proj.MatchString(name) {
			fp8[name], want[name] = a, a
			continue
		}
		// One scale per tensor: the largest magnitude maps to 448, FP8
		// e4m3's largest finite value.
		scale := g.Divide(g.Max(g.Abs(a), false), g.Scalar(448, mlx.Float32))
		q := g.ToFP8(g.Divide(a, scale))
		fp8[name] = q
		fp8[name+"_scale_inv"] = scale
		fp8[strings.TrimSuffix(name, "weight")+"activation_scale"] = g.Scalar(1, mlx.Float32)
		want[name] = g.Multiply(g.FromFP8(q, mlx.Float32), scale)
		codes = append(codes, name)
	}
	if len(codes) != 14 { // 7 projections in each of 2 layers
		t.Fatalf("%d projections, want 14", len(codes))
	}
	fp8Dir, wantDir := filepath.Join(t.TempDir(), "fp8"), filepath.Join(t.TempDir(), "want")
	saveBeside(t, dir, fp8Dir, fp8)
	saveBeside(t, dir, wantDir, want)
	markFP8(t, filepath.Join(fp8Dir, "model.safetensors"), codes)

	got, exp := prefillDir(t, fp8Dir, refs.Prompt), prefillDir(t, wantDir, refs.Prompt)
	if !slices.Equal(got, exp) {
		t.Fatal("the FP8 checkpoint's logits differ from those of its weights dequantized by MLX")
	}
	if orig := prefillDir(t, dir, refs.Prompt); slices.Equal(got, orig) {
		t.Fatal("the FP8 checkpoint's logits equal the float32 checkpoint's: were the weights rounded to FP8?")
	}

	// Errors.
	bad := func(t *testing.T, edit func(m map[string]*mlx.Array), opts nn.Options, msg string) {
		t.Helper()
		m := map[string]*mlx.Array{}
		for k, v := range fp8 {
			m[k] = v
		}
		edit(m)
		d := filepath.Join(t.TempDir(), "bad")
		saveBeside(t, dir, d, m)
		var still []string
		for _, n := range codes {
			if m[n] != nil && m[n].Dtype() == mlx.Uint8 {
				still = append(still, n)
			}
		}
		markFP8(t, filepath.Join(d, "model.safetensors"), still)
		_, err := registry.Load(d, opts)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Fatalf("error %v, want it to hold %q", err, msg)
		}
	}
	first := slices.Min(codes)
	t.Run("a tile scale of the wrong shape", func(t *testing.T) {
		bad(t, func(m map[string]*mlx.Array) {
			m[first+"_scale_inv"] = g.Full([]int{2, 2}, 0.01, mlx.Float32)
		}, nn.Options{}, "tensor "+first+"_scale_inv: shape [2 2] beside the weight "+first+" [64 128], want one float, or one per 128 x 128 tile: [1 1] for a matrix")
	})
	t.Run("scale without weight", func(t *testing.T) {
		bad(t, func(m map[string]*mlx.Array) { delete(m, first) }, nn.Options{},
			"tensor "+first+"_scale_inv: a scale without its weight "+first)
	})
	t.Run("float weight with a scale", func(t *testing.T) {
		bad(t, func(m map[string]*mlx.Array) { m[first] = ts[first] }, nn.Options{},
			"tensor "+first+": float32, want FP8 codes (F8_E4M3) beside its scale "+first+"_scale_inv")
	})
}

// markFP8 rewrites a safetensors file's header so that the named uint8
// tensors are F8_E4M3, as an FP8 checkpoint stores its codes; the data are
// unchanged.
func markFP8(t *testing.T, path string, names []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data[:8])
	var header map[string]map[string]any
	if err := json.Unmarshal(data[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		e, ok := header[name]
		if !ok || e["dtype"] != "U8" {
			t.Fatalf("%s: %v, want a U8 tensor", name, e)
		}
		e["dtype"] = "F8_E4M3"
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), data[8+n:]...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInt4PackedErrors: a compressed-tensors pack-quantized checkpoint
// whose packed weights cannot be read is refused naming the tensor, on the
// int4_packed level of deepseek_v3/dense_published (which loads, and
// matches mlx-lm in the parity matrix).
func TestInt4PackedErrors(t *testing.T) {
	_, models, _ := derived(t)
	dir := LevelDir(models, CaseInfo{Arch: "deepseek_v3", Case: "dense_published"}, "int4_packed")
	const base = "model.layers.0.self_attn.o_proj."
	for _, x := range []struct {
		name string
		edit func(g *mlx.Graph, ts map[string]*mlx.Array)
		want string
	}{
		{"no scales", func(g *mlx.Graph, ts map[string]*mlx.Array) { delete(ts, base+"weight_scale") },
			"tensor " + base + "weight_packed: packed weights without their scales " + base + "weight_scale"},
		{"float words", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			ts[base+"weight_packed"] = g.AsType(ts[base+"weight_packed"], mlx.Float32)
		}, "tensor " + base + "weight_packed: float32 [64 16], want int32 words [out, in/8] (eight 4-bit values each)"},
		{"a scale per 64", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			s := ts[base+"weight_scale"]
			ts[base+"weight_scale"] = g.Slice(s, []int{0, 0}, []int{s.Dim(0), s.Dim(1) / 2})
		}, "tensor " + base + "weight_scale: float32 [64 2] beside " + base + "weight_packed [64 16], want a float scale per 32 values: [64 4]"},
		{"a wrong weight_shape", func(g *mlx.Graph, ts map[string]*mlx.Array) {
			ts[base+"weight_shape"] = mlx.FromSlice(g, []int32{64, 64}, 2)
		}, "tensor " + base + "weight_shape: [64 64], want [64 128] (the packed weights' rows and values)"},
	} {
		t.Run(x.name, func(t *testing.T) { refusesEdited(t, dir, x.edit, x.want) })
	}
}
