package nn

import (
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// RandomTensors makes a value for every spec on g, float32, from seed:
// linear weights normal with standard deviation 1/sqrt(fan-in), norm
// weights near one, embeddings, biases and the rest small. A model loaded
// from them runs with activations of ordinary size, for tests and demos.
func RandomTensors(g *mlx.Graph, specs []TensorSpec, seed uint64) map[string]*mlx.Array {
	key := g.RandomKey(seed)
	out := map[string]*mlx.Array{}
	for _, s := range specs {
		var k *mlx.Array
		key, k = g.RandomSplit(key)
		a := g.Normal(s.Shape, mlx.Float32, 0, 1, k)
		switch {
		case s.Scale:
			a = g.AddScalar(g.MultiplyScalar(a, 0.1), 1)
		case len(s.Shape) == 3 && s.Shape[2] == 1:
			// a depthwise convolution's [channels, taps, 1]: each channel a
			// linear over its taps
			a = g.MultiplyScalar(a, 1/math.Sqrt(float64(s.Shape[1])))
		case len(s.Shape) >= 2 && !strings.HasSuffix(s.Name, "embed_tokens.weight"):
			// a linear's [out, in], or stacked experts' [E, out, in]
			a = g.MultiplyScalar(a, 1/math.Sqrt(float64(s.Shape[len(s.Shape)-1])))
		default:
			a = g.MultiplyScalar(a, 0.1)
		}
		out[s.Name] = a
	}
	return out
}

// StoredTensors are values (one per spec, by name) as a checkpoint holds
// them, in dtype: a quantized spec as its packed weight, scales and
// biases, or, when dequantized is set, as the dense matrix those stand for
// (the same model, unquantized).
func StoredTensors(g *mlx.Graph, specs []TensorSpec, values map[string]*mlx.Array, dtype mlx.Dtype, dequantized bool) map[string]*mlx.Array {
	out := map[string]*mlx.Array{}
	for _, s := range specs {
		a := g.AsType(values[s.Name], dtype)
		if s.Quant == nil {
			out[s.Name] = a
			continue
		}
		mode := s.Quant.Mode
		if mode == "" {
			mode = "affine"
		}
		q := g.QuantizeMode(a, s.Quant.GroupSize, s.Quant.Bits, mode)
		if dequantized {
			out[s.Name] = g.Dequantize(q, dtype)
			continue
		}
		base := strings.TrimSuffix(s.Name, ".weight")
		out[s.Name] = q.Weight
		out[base+".scales"] = q.Scales
		if q.Biases != nil {
			out[base+".biases"] = q.Biases
		}
	}
	return out
}

// RandomCheckpoint writes dir/config.json (config) and dir/model.safetensors
// with random values for specs (RandomTensors) in dtype, quantized where
// the specs say: a directory Load reads like one mlx-lm saved.
func RandomCheckpoint(dir string, config []byte, specs []TensorSpec, dtype mlx.Dtype, seed uint64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		return err
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	tensors := StoredTensors(g, specs, RandomTensors(g, specs, seed), dtype, false)
	return mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "mlx"})
}
