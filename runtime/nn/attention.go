package nn

import (
	"fmt"
	"math"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// SoftcapAttention is attention with soft-capped scores, written out (MLX's
// fused kernel has no cap): q [B, Hq, L, D] is scaled, scores against the
// keys are capped to tanh(s / cap) * cap, masked, normalized in float32
// precision and mixed with the values; [B, Hq, L, D]. Gemma 2 attends so.
func SoftcapAttention(g *mlx.Graph, q *mlx.Array, kvs kv.KV, scale, cap float64, mask mlx.AttentionMask) *mlx.Array {
	if kvs.Keys == nil {
		g.Failf("nn: soft-capped attention over a quantized cache is not supported")
		return q
	}
	k, v := kvs.Keys, kvs.Values
	B, Hq, L, D := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	Hkv := k.Dim(1)
	if Hkv == 0 || Hq%Hkv != 0 {
		g.Failf("nn: %d query heads do not group over %d key heads", Hq, Hkv)
		return q
	}
	repeats := Hq / Hkv
	q = g.MultiplyScalar(q, scale)
	if repeats > 1 {
		q = g.Reshape(q, B, Hkv, repeats, L, D) // [B, Hkv, repeats, L, D]
		k = g.ExpandDims(k, 2)                  // [B, Hkv, 1, S, D]
		v = g.ExpandDims(v, 2)
	}
	scores := g.Matmul(q, g.Swapaxes(k, -1, -2)) // [..., L, S]
	scores = Softcap(g, scores, cap)
	switch mask.Mode {
	case "array":
		m := mask.Array
		if repeats > 1 && m.Ndim() == 4 {
			m = g.ExpandDims(m, 2) // a per-row mask [B, 1, L, S] over the grouped heads
		}
		if m.Dtype() == mlx.Bool {
			scores = g.Where(m, scores, g.Scalar(lowest(scores.Dtype()), scores.Dtype()))
		} else {
			scores = g.Add(scores, m)
		}
	case "causal":
		S := k.Dim(-2)
		scores = g.Where(kv.CausalMaskArray(g, L, S-L, 0), scores, g.Scalar(lowest(scores.Dtype()), scores.Dtype()))
	}
	scores = g.Softmax(scores, true, -1)
	out := g.Matmul(scores, v)
	if repeats > 1 {
		out = g.Reshape(out, B, Hq, L, D) // [B, Hq, L, D]
	}
	return out
}

// lowest is the most negative finite value of a float dtype (numpy's
// finfo(dtype).min).
func lowest(dt mlx.Dtype) float64 {
	switch dt {
	case mlx.Float16:
		return -65504
	case mlx.BFloat16:
		return -3.3895313892515355e38
	case mlx.Float64:
		return -math.MaxFloat64
	}
	return -math.MaxFloat32
}

// CacheSpec is the cache one layer attends over: a window of Window
// positions on a sliding layer, every position when Window is 0.
type CacheSpec struct {
	Window int
}

// NewCaches makes one empty cache per layer spec, as opts choose: a full
// cache on full-attention layers, a window cache on sliding ones.
func NewCaches(specs []CacheSpec, opts kv.Options) ([]kv.Cache, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	caches := make([]kv.Cache, len(specs))
	for i, s := range specs {
		if s.Window > 0 {
			caches[i] = opts.Sliding(s.Window)
		} else {
			caches[i] = opts.Full()
		}
	}
	return caches, nil
}

// DefaultCaches is NewCaches with mlx-lm's default caches (the zero
// kv.Options, which are always valid).
func DefaultCaches(specs []CacheSpec) []kv.Cache {
	caches, _ := NewCaches(specs, kv.Options{})
	return caches
}

// CheckCaches returns caches when it holds one cache per layer. Otherwise it
// records the mismatch on g and returns stand-ins that let the forward pass
// finish building (and fail at Eval with that error).
func CheckCaches(g *mlx.Graph, caches []kv.Cache, layers int) []kv.Cache {
	if len(caches) == layers {
		return caches
	}
	g.Failf("nn: %d caches for %d layers (make them with NewCaches)", len(caches), layers)
	out := make([]kv.Cache, layers)
	for i := range out {
		out[i] = failedCache{}
	}
	return out
}

// failedCache stands in for a missing cache in a graph that has failed.
type failedCache struct{}

func (failedCache) Offset() int { return 0 }
func (failedCache) Update(g *mlx.Graph, k, v *mlx.Array) kv.KV {
	return kv.KV{Keys: k, Values: v}
}
func (failedCache) Mask(*mlx.Graph, int, int, bool) mlx.AttentionMask { return mlx.NoMask }
func (failedCache) Trim(int) int                                      { return 0 }
func (failedCache) Trimmable() bool                                   { return false }
func (failedCache) Nbytes() int                                       { return 0 }
func (failedCache) Free()                                             {}

// SeqLen is L of tokens [B, L], recording an error on g when tokens is not
// a 2-D integer array.
func SeqLen(g *mlx.Graph, tokens *mlx.Array) int {
	dt := tokens.Dtype()
	if tokens.Ndim() != 2 || dt.IsFloat() || dt == mlx.Bool || !dt.Valid() {
		g.Fail(fmt.Errorf("nn: tokens are %s; want [B, L] integers", tokens))
		return 0
	}
	return tokens.Dim(1)
}

// MaskLayers picks, from a per-layer table of sliding layers, the layers
// whose caches the forward pass asks for its two masks: the first
// full-attention layer and the first sliding layer (the full one again
// when none slides), as mlx-lm's models do.
func MaskLayers(sliding []bool) (full, slide int, err error) {
	full, slide = -1, -1
	for i, s := range sliding {
		switch {
		case s && slide < 0:
			slide = i
		case !s && full < 0:
			full = i
		}
	}
	if full < 0 {
		return 0, 0, fmt.Errorf("no full-attention layer")
	}
	if slide < 0 {
		slide = full
	}
	return full, slide, nil
}
