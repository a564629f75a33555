package parity

import (
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestDefaultKeepsWeightsStored: at the default compute dtype (float32 on
// the CPU) a half-precision checkpoint computes in float32 but its weights
// stay as stored: the loaded bytes are the checkpoint dtype's, up to the
// norms and biases cast to float32 (under 2% here); asked for float32 in
// the old sense, by casting, they would double. Explicit float32 means the
// same as the default.
func TestDefaultKeepsWeightsStored(t *testing.T) {
	_, models, _ := derived(t)
	for _, c := range []struct{ arch, cas, level string }{
		{"llama", "base", "bfloat16"}, {"llama", "base", "float16"}, {"llama", "base", "q4_g64"},
		{"qwen3", "base", "q8_g32"}, {"gemma2", "capped", "bfloat16"},
	} {
		t.Run(c.arch+"/"+c.cas+"/"+c.level, func(t *testing.T) {
			dir := LevelDir(models, CaseInfo{Arch: c.arch, Case: c.cas}, c.level)
			load := func(dt mlx.Dtype) nn.Info {
				m, err := registry.Load(dir, nn.Options{Dtype: dt})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Free()
				return m.Info()
			}
			stored, def, f32 := load(nn.CheckpointDtype), load(0), load(mlx.Float32)
			if def.Dtype != mlx.Float32 || f32.Dtype != mlx.Float32 {
				t.Errorf("the default computes in %s and float32 in %s, want float32", def.Dtype, f32.Dtype)
			}
			if stored.Dtype == mlx.Float32 {
				t.Errorf("the checkpoint's dtype computes in float32, want its own")
			}
			t.Logf("weights: %d bytes stored, %d at the default, %d at float32", stored.Nbytes, def.Nbytes, f32.Nbytes)
			if float64(def.Nbytes) > 1.02*float64(stored.Nbytes) || def.Nbytes != f32.Nbytes {
				t.Errorf("weights take %d bytes at the default and %d at float32, want those of the checkpoint (%d) within 2%%",
					def.Nbytes, f32.Nbytes, stored.Nbytes)
			}
		})
	}
}
