package parity

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestCorrectionBiasBesideRouter loads exaone_moe/base with each sparse
// layer's correction bias directly under the MLP (where some checkpoints
// keep it, and mlx-lm's sanitize moves it from) and checks its prefill
// logits equal the checkpoint's own bit for bit; a checkpoint holding the
// bias in both places is refused, naming both.
func TestCorrectionBiasBesideRouter(t *testing.T) {
	_, models, _ := derived(t)
	c := CaseInfo{Arch: "exaone_moe", Case: "base"}
	dir := LevelDir(models, c, "float32")
	refs, err := LoadRefs(RefsDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	const at, beside = ".mlp.gate.e_score_correction_bias", ".mlp.e_score_correction_bias"
	write := func(both bool) string {
		ts, _, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*mlx.Array{}
		moved := 0
		for name, a := range ts {
			out[name] = a
			if strings.HasSuffix(name, at) {
				out[strings.TrimSuffix(name, at)+beside] = a
				if !both {
					delete(out, name)
				}
				moved++
			}
		}
		if moved == 0 {
			t.Fatal("the checkpoint has no correction bias")
		}
		hf := filepath.Join(t.TempDir(), "moved")
		saveBeside(t, dir, hf, out)
		for _, a := range ts {
			a.Free()
		}
		return hf
	}
	t.Run("moved", func(t *testing.T) {
		if !slices.Equal(prefillDir(t, write(false), refs.Prompt), prefillDir(t, dir, refs.Prompt)) {
			t.Fatal("the logits with the bias beside the router differ from the checkpoint's own")
		}
	})
	t.Run("both", func(t *testing.T) {
		_, err := registry.Load(write(true), nn.Options{})
		want := "layer 1: both mlp.e_score_correction_bias and mlp.gate.e_score_correction_bias: the checkpoint holds one tensor twice"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want it to hold %q", err, want)
		}
	})
}
