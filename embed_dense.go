package archgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// Dense is a sentence-transformers Dense module: a linear layer (and an
// activation) applied to each pooled vector before its normalization, as
// EmbeddingGemma's folder has two (768 to 3072 to 768).
type Dense struct {
	// Weight is [Out, In] in row order; Bias is Out long or nil.
	Weight  []float32
	Bias    []float32
	In, Out int
	// Activation is "identity" or "tanh".
	Activation string
}

// readDense reads the Dense module in dir: its config.json (in_features,
// out_features, bias, activation_function) and model.safetensors
// (linear.weight, linear.bias).
func readDense(dir string) (Dense, error) {
	var d Dense
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	var cfg struct {
		In   *int    `json:"in_features"`
		Out  *int    `json:"out_features"`
		Bias *bool   `json:"bias"`
		Act  *string `json:"activation_function"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return d, fmt.Errorf("%s: not a Dense module's config: %v", path, err)
	}
	switch {
	case cfg.In == nil || *cfg.In < 1:
		return d, fmt.Errorf("%s: in_features: want a positive integer", path)
	case cfg.Out == nil || *cfg.Out < 1:
		return d, fmt.Errorf("%s: out_features: want a positive integer", path)
	}
	d.In, d.Out, d.Activation = *cfg.In, *cfg.Out, "identity"
	if cfg.Act != nil {
		switch {
		case strings.HasSuffix(*cfg.Act, ".Identity"):
		case strings.HasSuffix(*cfg.Act, ".Tanh"):
			d.Activation = "tanh"
		default:
			return d, fmt.Errorf("%s: activation_function %q, which archgen's Dense modules do not run (Identity and Tanh do)", path, *cfg.Act)
		}
	}
	weights := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(weights); errors.Is(err, fs.ErrNotExist) {
		return d, fmt.Errorf("%s: no model.safetensors: archgen reads a Dense module's weights from it (not pytorch_model.bin)", dir)
	}
	tensors, _, err := mlx.LoadSafetensors(weights, nil)
	if err != nil {
		return d, err
	}
	defer func() {
		for _, a := range tensors {
			a.Free()
		}
	}()
	g := mlx.NewGraph(nil)
	defer g.Close()
	read := func(name string, shape ...int) ([]float32, error) {
		a, ok := tensors[name]
		if !ok {
			return nil, fmt.Errorf("%s: no tensor %s", weights, name)
		}
		if fmt.Sprint(a.Shape()) != fmt.Sprint(shape) {
			return nil, fmt.Errorf("%s: %s is %v, want %v (out_features, in_features)", weights, name, a.Shape(), shape)
		}
		f := g.AsType(a, mlx.Float32)
		if err := g.Eval(f); err != nil {
			return nil, err
		}
		return f.Float32s()
	}
	if d.Weight, err = read("linear.weight", d.Out, d.In); err != nil {
		return d, err
	}
	if cfg.Bias == nil || *cfg.Bias {
		if d.Bias, err = read("linear.bias", d.Out); err != nil {
			return d, err
		}
	}
	return d, nil
}

// applyDense runs rows (pooled vectors, [N][In]) through the layers in
// order, in float32 as sentence-transformers does, and returns the
// results in float64.
func applyDense(rows [][]float64, layers []Dense) ([][]float64, error) {
	if len(layers) == 0 || len(rows) == 0 {
		return rows, nil
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	n, in := len(rows), layers[0].In
	flat := make([]float32, 0, n*in)
	for _, r := range rows {
		for _, x := range r {
			flat = append(flat, float32(x))
		}
	}
	x := mlx.FromSlice(g, flat, n, in)
	for _, d := range layers {
		w := mlx.FromSlice(g, d.Weight, d.Out, d.In)
		x = g.Matmul(x, g.Transpose(w, 1, 0))
		if d.Bias != nil {
			x = g.Add(x, mlx.FromSlice(g, d.Bias, d.Out))
		}
		if d.Activation == "tanh" {
			x = g.Tanh(x)
		}
	}
	if err := g.Eval(x); err != nil {
		return nil, err
	}
	vals, err := x.Float32s()
	if err != nil {
		return nil, err
	}
	out := layers[len(layers)-1].Out
	res := make([][]float64, n)
	for i := range res {
		res[i] = make([]float64, out)
		for j := range out {
			res[i][j] = float64(vals[i*out+j])
		}
	}
	return res, nil
}
