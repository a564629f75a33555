package nn_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/archgen/archgen/internal/disttest"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// The stack of TestShardedStack: x [2, 3, 64] -> a -> silu -> b -> gu ->
// silu(gate) * up -> d, each linear [out, in] with its role, as a
// transformer block's pairs of projections split (a, gu all-to-sharded; b,
// d sharded-to-all); gu is a fused gate and up projection of 2 parts.
var stackLayers = []struct {
	name    string
	out, in int
	bias    bool
	role    nn.ShardRole
}{
	{"a", 128, 64, true, nn.AllToSharded},
	{"b", 64, 128, true, nn.ShardedToAll},
	{"gu", 256, 64, true, nn.AllToSharded},
	{"d", 64, 128, false, nn.ShardedToAll},
}

var stackPlan = &nn.ShardPlan{
	Linears: map[string]nn.ShardRole{"a": nn.AllToSharded, "b": nn.ShardedToAll, "gu": nn.AllToSharded, "d": nn.ShardedToAll},
	Parts:   map[string]int{"gu": 2},
}

// writeStack writes the stack's random checkpoint, 4-bit (groups of 32)
// when quant.
func writeStack(t *testing.T, dir string, quant bool) {
	var specs []nn.TensorSpec
	config := `{}`
	var q *nn.QuantParams
	if quant {
		config = `{"quantization": {"group_size": 32, "bits": 4}}`
		q = &nn.QuantParams{GroupSize: 32, Bits: 4, Mode: "affine"}
	}
	for _, l := range stackLayers {
		specs = append(specs, nn.TensorSpec{Name: l.name + ".weight", Shape: []int{l.out, l.in}, Quant: q})
		if l.bias {
			specs = append(specs, nn.TensorSpec{Name: l.name + ".bias", Shape: []int{l.out}})
		}
	}
	if err := nn.RandomCheckpoint(dir, []byte(config), specs, mlx.Float32, 7); err != nil {
		t.Fatal(err)
	}
}

// stackResult is what one process computed.
type stackResult struct {
	Out, OutTensors []float32 // read from the files, and from tensors in memory
	Nbytes          int
	Err             string
	Refusals        []string
}

// runStack loads the stack from dir (with grp, when sharding: each layer
// then asks for its share, as a model built on divided counts does) and
// runs it on a fixed input.
func runStack(dir string, grp *mlx.Group, inMemory bool) ([]float32, int, error) {
	config, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, 0, err
	}
	opts := nn.Options{}
	n := 1
	if grp != nil {
		opts.Group, opts.Shard, n = grp, stackPlan, grp.Size()
	}
	if inMemory {
		opts.Tensors, _, err = mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
		if err != nil {
			return nil, 0, err
		}
	}
	w, err := nn.OpenWeights(dir, config, opts)
	if err != nil {
		return nil, 0, err
	}
	var ls []*nn.Linear
	for _, l := range stackLayers {
		out, in := l.out, l.in
		switch l.role {
		case nn.AllToSharded:
			out /= n
		case nn.ShardedToAll:
			in /= n
		}
		ls = append(ls, w.Linear(l.name, out, in, l.bias))
	}
	params, err := w.Finish()
	if err != nil {
		return nil, 0, err
	}
	defer params.Free()
	g := mlx.NewGraph(nil)
	defer g.Close()
	xs := make([]float32, 2*3*64)
	for i := range xs {
		xs[i] = float32(math.Sin(float64(i) * 0.37))
	}
	h := mlx.FromSlice(g, xs, 2, 3, 64)
	h = ls[0].Apply(g, h)
	h = ls[1].Apply(g, g.SiLU(h))
	gu := g.Split(ls[2].Apply(g, h), 2, -1)
	h = ls[3].Apply(g, g.Multiply(g.SiLU(gu[0]), gu[1]))
	if err := g.Eval(h); err != nil {
		return nil, 0, err
	}
	v, err := h.Float32s()
	return v, params.Nbytes(), err
}

// TestShardWorker is one rank of TestShardedStack.
func TestShardWorker(t *testing.T) {
	name, ok := disttest.Worker()
	if !ok {
		return
	}
	var res stackResult
	defer func() { disttest.Report(res) }()
	grp, err := mlx.InitGroup(mlx.GroupOptions{Backend: "ring"})
	if err != nil {
		res.Err = err.Error()
		return
	}
	dir := os.Getenv("ARCHGEN_TEST_DIR")
	switch name {
	case "stack":
		if res.Out, res.Nbytes, err = runStack(dir, grp, false); err == nil {
			res.OutTensors, _, err = runStack(dir, grp, true)
		}
	case "refuse":
		res.Refusals = refusals(dir, grp)
	case "vector":
		res.Out, err = shardedVector(dir, grp)
	}
	if err != nil {
		res.Err = err.Error()
	}
}

// TestShardedStack runs the stack in 2 processes, float32 and 4-bit, and
// compares each process's output with one process's.
func TestShardedStack(t *testing.T) {
	for _, quant := range []bool{false, true} {
		name := map[bool]string{false: "float32", true: "q4_g32"}[quant]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeStack(t, dir, quant)
			want, whole, err := runStack(dir, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			res := disttest.Run(t, 2, "TestShardWorker", "stack", disttest.Options{
				Env: []string{"ARCHGEN_TEST_DIR=" + dir}, Timeout: 60 * time.Second})
			for _, r := range res {
				var got stackResult
				r.Decode(t, &got)
				if got.Err != "" {
					t.Fatalf("rank %d: %s\n%s", r.Rank, got.Err, r.Stderr)
				}
				tol := 1e-5
				if quant && mlx.NativeQMV16() {
					// The 4-bit products round x to 16 bits per group
					// (qmv16.h): sums of another order upstream
					// may land an x a step (1/32767 of its group's
					// largest value) away.
					tol = 1e-4
				}
				for what, out := range map[string][]float32{"from the files": got.Out, "from tensors": got.OutTensors} {
					if d := relDiff(out, want); d > tol {
						t.Errorf("rank %d, %s: %.3g of the scale from one process's output", r.Rank, what, d)
					}
				}
				// each rank holds half of every weight, and the
				// sharded-to-all layers' whole biases (b's 64)
				wantBytes := (whole-64*4)/2 + 64*4
				if got.Nbytes != wantBytes {
					t.Errorf("rank %d holds %d bytes of weights, want %d (of one process's %d)", r.Rank, got.Nbytes, wantBytes, whole)
				}
			}
		})
	}
}

func relDiff(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, scale float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i]-want[i])))
		scale = math.Max(scale, math.Abs(float64(want[i])))
	}
	return d / scale
}

// shardConfig is a parsed config as generated packages declare theirs.
type shardConfig struct {
	ModelType string `json:"model_type"`
	Heads     int    `json:"num_attention_heads"`
	KVHeads   int    `json:"num_key_value_heads"`
	Inter     int    `json:"intermediate_size"`
}

type stackModel struct{ p *nn.Params }

func (m stackModel) Free() { m.p.Free() }

// refusals loads what a group of 2 cannot share and returns the errors.
func refusals(dir string, grp *mlx.Group) []string {
	var out []string
	add := func(err error) {
		out = append(out, fmt.Sprint(err))
	}
	// a 4-bit sharded-to-all layer of 96 columns: 3 groups of 32
	config := []byte(`{"quantization": {"group_size": 32, "bits": 4}}`)
	w, err := nn.OpenWeights(dir, config, nn.Options{Group: grp, Shard: &nn.ShardPlan{
		Linears: map[string]nn.ShardRole{"e": nn.ShardedToAll}}})
	if err != nil {
		add(err)
	} else {
		w.Linear("e", 64, 96/2, false)
		w.Drop("a.weight", "a.scales", "a.biases", "a.bias", "b.weight", "b.scales", "b.biases", "b.bias",
			"gu.weight", "gu.scales", "gu.biases", "gu.bias", "d.weight", "d.scales", "d.biases")
		_, err = w.Finish()
		add(err)
	}
	// head counts the group does not divide, and an arch without a plan
	parse := func(data []byte) (*shardConfig, error) {
		var c shardConfig
		return &c, json.Unmarshal(data, &c)
	}
	build := func(w *nn.Weights, c *shardConfig) (stackModel, error) {
		p, err := w.Finish()
		return stackModel{p}, err
	}
	cfg := []byte(`{"model_type": "stackarch", "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536}`)
	for _, plan := range []*nn.ShardPlan{
		{Counts: []string{"num_attention_heads", "num_key_value_heads", "intermediate_size"}},
		nil,
	} {
		m, err := nn.LoadModel(dir, nn.Options{Config: cfg, Group: grp, Shard: plan}, "stackarch", nil, parse, build)
		if err == nil {
			m.Free()
		}
		add(err)
	}
	return out
}

// TestShardRefusals checks the messages of shares a group of 2 cannot take.
func TestShardRefusals(t *testing.T) {
	dir := t.TempDir()
	writeStack(t, dir, true)
	// one more layer, e [64, 96], beside the stack's
	g := mlx.NewGraph(nil)
	defer g.Close()
	arrays, _, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := g.Quantize(g.Normal([]int{64, 96}, mlx.Float32, 0, 0.1, g.RandomKey(3)), 32, 4)
	arrays["e.weight"], arrays["e.scales"], arrays["e.biases"] = q.Weight, q.Scales, q.Biases
	if err := mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), arrays, nil); err != nil {
		t.Fatal(err)
	}
	res := disttest.Run(t, 2, "TestShardWorker", "refuse", disttest.Options{
		Env: []string{"ARCHGEN_TEST_DIR=" + dir}, Timeout: 60 * time.Second})
	want := []string{
		"e: cannot shard over 2 processes: its 96 input columns make 3 quantization groups of 32, which do not divide evenly",
		"config.json: cannot shard over 2 processes: num_attention_heads = 9, num_key_value_heads = 3: the group size must divide each",
		"config.json: cannot shard over 2 processes: stackarch has no tensor-parallel plan",
	}
	for _, r := range res {
		var got stackResult
		r.Decode(t, &got)
		if got.Err != "" || len(got.Refusals) != len(want) {
			t.Fatalf("rank %d: %s %q\n%s", r.Rank, got.Err, got.Refusals, r.Stderr)
		}
		for i, w := range want {
			if !strings.Contains(got.Refusals[i], w) {
				t.Errorf("rank %d: %q\nwant %q", r.Rank, got.Refusals[i], w)
			}
		}
	}
}
