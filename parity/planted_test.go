package parity

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestPlantedBugs shows that Check still catches two wrong formulas, each
// planted in the checkpoint rather than in the code, so that the correct
// generated model computes exactly what the buggy one would:
//
//   - a norm without 1+w, in an arch whose RMSNorm scales by 1+w (gemma):
//     every norm weight shifted by -1 makes 1+w what w was;
//   - a sliding window off by one (llama with sliding layers, window 6
//     against a 20-token prompt): config.json's sliding_window one larger.
//
// Each is measured against mlx-lm's references of the real checkpoint: the
// real one must pass, the planted one must fail the teacher-forced logits
// check (and so the whole check), at the sharp float32 level and at the
// loosest levels; and at those levels, loaded at the default compute
// dtype, CheckAccuracy against mlx-lm's float32 run on the real weights.
func TestPlantedBugs(t *testing.T) {
	refsDir, models, _ := derived(t)
	bugs := []struct {
		name  string
		c     CaseInfo
		plant func(t *testing.T, dir string)
		// freeToo: the free-running tokens must differ too, at float32
		// (the norm bug keeps gemma/base's tokens: only logits show it)
		freeToo bool
	}{
		{"norm without 1+w", CaseInfo{Arch: "gemma", Case: "base"}, shiftNormWeights, false},
		{"sliding window off by one", CaseInfo{Arch: "llama", Case: "sliding"}, widenWindow, true},
	}
	for _, bug := range bugs {
		refs, err := LoadRefs(refsDir, bug.c)
		if err != nil {
			t.Fatal(err)
		}
		for _, level := range []string{"float32", "bfloat16", "q4_g32"} {
			t.Run(bug.name+"/"+level, func(t *testing.T) {
				want, err := LoadDumps(refsDir, bug.c, level)
				if err != nil {
					t.Fatal(err)
				}
				real := LevelDir(models, bug.c, level)
				if r := check(t, real, refs, want, level); !r.Pass() {
					t.Fatalf("the real checkpoint fails: %s", strings.Join(r.Problems(want.Vocab), "; "))
				}
				planted := filepath.Join(t.TempDir(), "planted")
				copyDir(t, real, planted)
				bug.plant(t, planted)
				r := check(t, planted, refs, want, level)
				t.Logf("planted: prefill %.3g, worst teacher-forced step %d at %.3g of its scale (tolerance %.3g), free tokens %d/%d equal, near-tie at %d",
					r.Prefill.Rel(), r.WorstStep(), r.Worst().Rel(), r.Tol.Rel, r.FreeEqual, len(r.Steps), r.NearTie)
				if r.ForcedOK() || r.Pass() {
					t.Errorf("the planted bug passes the teacher-forced check")
				}
				if bug.freeToo && level == "float32" && r.FreeOK() {
					t.Errorf("the planted bug passes the free-running check")
				}
				if level == "float32" {
					return
				}
				// the same level at the default compute dtype, against
				// mlx-lm's float32 run on the real checkpoint's weights
				run, err := LoadFloat32Run(models, bug.c, level)
				if err != nil {
					t.Fatal(err)
				}
				if a := checkAccuracy(t, real, refs, run); !a.Pass() {
					t.Fatalf("the real checkpoint fails at the default dtype: %s", strings.Join(a.Problems(), "; "))
				}
				a := checkAccuracy(t, planted, refs, run)
				w := a.Steps[a.Worst()]
				t.Logf("planted, default dtype: prefill %.3g, worst teacher-forced step %d at %.3g of its scale (bound %.3g)",
					a.Prefill.Rel(), a.Worst(), w.Rel(), w.Bound())
				if a.ForcedOK() || a.Pass() {
					t.Errorf("the planted bug passes the default dtype's teacher-forced check")
				}
			})
		}
	}
}

func check(t *testing.T, dir string, refs *Refs, want *Dumps, level string) *Result {
	t.Helper()
	m, err := registry.Load(dir, nn.Options{Dtype: nn.CheckpointDtype})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	r, err := Check(m, refs, want, level)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func checkAccuracy(t *testing.T, dir string, refs *Refs, run *Float32Run) *Accuracy {
	t.Helper()
	m, err := registry.Load(dir, nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	a, err := CheckAccuracy(m, refs, run)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// shiftNormWeights subtracts 1 from every norm weight of dir's checkpoint.
func shiftNormWeights(t *testing.T, dir string) {
	path := filepath.Join(dir, "model.safetensors")
	arrays, meta, err := mlx.LoadSafetensors(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, a := range arrays {
			a.Free()
		}
	}()
	g := mlx.NewGraph(nil)
	defer g.Close()
	shifted := 0
	for name, a := range arrays {
		if strings.HasSuffix(name, "norm.weight") {
			arrays[name] = g.AddScalar(a, -1)
			shifted++
		}
	}
	if shifted == 0 {
		t.Fatalf("%s has no norm weights", path)
	}
	// The arrays read path lazily: write beside it, then replace it.
	tmp := filepath.Join(dir, "shifted.safetensors")
	if err := mlx.SaveSafetensors(tmp, arrays, meta); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// widenWindow adds 1 to config.json's sliding_window.
func widenWindow(t *testing.T, dir string) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	w, ok := cfg["sliding_window"].(float64)
	if !ok || w <= 0 {
		t.Fatalf("%s: sliding_window is %v", path, cfg["sliding_window"])
	}
	cfg["sliding_window"] = w + 1
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKVCasesNeedTheQuantizedCache shows that the cases decoded with a
// quantized KV cache test it: the same checkpoints decoded with dense
// caches fail their float32 teacher-forced check.
func TestKVCasesNeedTheQuantizedCache(t *testing.T) {
	refsDir, models, idx := derived(t)
	n := 0
	for _, c := range idx.Cases {
		refs, err := LoadRefs(refsDir, c)
		if err != nil {
			t.Fatal(err)
		}
		if refs.KVCache == nil {
			continue
		}
		n++
		t.Run(c.Key(), func(t *testing.T) {
			want, err := LoadDumps(refsDir, c, "float32")
			if err != nil {
				t.Fatal(err)
			}
			dense := *refs
			dense.KVCache = nil
			r := check(t, LevelDir(models, c, "float32"), &dense, want, "float32")
			t.Logf("dense caches: worst teacher-forced step %d at %.3g of its scale", r.WorstStep(), r.Worst().Rel())
			if r.ForcedOK() {
				t.Errorf("dense caches pass the teacher-forced check of a quantized KV case")
			}
		})
	}
	if n == 0 {
		t.Fatal("no case decodes with a quantized KV cache")
	}
}
