package nn_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/archgen/archgen/internal/disttest"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// shardedVector loads the vector s [8] of dir with a plan that splits it
// (a value per head, as attention sinks are): each process asks for its
// share of 8 / group size.
func shardedVector(dir string, grp *mlx.Group) ([]float32, error) {
	config, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	w, err := nn.OpenWeights(dir, config, nn.Options{Group: grp, Shard: &nn.ShardPlan{
		Linears: map[string]nn.ShardRole{"s": nn.AllToSharded}}})
	if err != nil {
		return nil, err
	}
	v := w.Vector("s", 8/grp.Size())
	params, err := w.Finish()
	if err != nil {
		return nil, err
	}
	defer params.Free()
	return v.Float32s()
}

// TestShardedVector: over 2 processes, a vector the plan splits by heads
// gives rank r the entries [4r, 4r+4) of the whole.
func TestShardedVector(t *testing.T) {
	dir := t.TempDir()
	if err := nn.RandomCheckpoint(dir, []byte(`{}`), []nn.TensorSpec{{Name: "s", Shape: []int{8}}}, mlx.Float32, 3); err != nil {
		t.Fatal(err)
	}
	ts, _, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := ts["s"].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	res := disttest.Run(t, 2, "TestShardWorker", "vector", disttest.Options{
		Env: []string{"ARCHGEN_TEST_DIR=" + dir}, Timeout: 60 * time.Second})
	for _, r := range res {
		var got stackResult
		r.Decode(t, &got)
		if got.Err != "" {
			t.Fatalf("rank %d: %s\n%s", r.Rank, got.Err, r.Stderr)
		}
		if want := whole[4*r.Rank : 4*r.Rank+4]; !slices.Equal(got.Out, want) {
			t.Errorf("rank %d: %v, want %v", r.Rank, got.Out, want)
		}
	}
}
