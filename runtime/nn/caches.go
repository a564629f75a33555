package nn

import (
	"fmt"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// The caches a generated model makes for its layers, and the checks its
// Forward runs on the ones it is handed.

// CacheSpec is the cache one layer keeps: for attention (States 0, Parts
// nil), a window of Window positions on a sliding layer, every position
// when Window is 0; for a recurrent layer, States slots (kv.States); for a
// layer that keeps several, its Parts (kv.List), each a spec of its own.
type CacheSpec struct {
	Window int
	States int
	Parts  []CacheSpec
	// None: the layer keeps no cache (a feed-forward layer of a single
	// block); the model's caches are its other layers', in order.
	None bool
	// Encoder: the layer attends over its whole input at once and keeps
	// nothing (kv.Encoding); Window is then its local span, if any.
	Encoder bool
	// Shares, with None: the layer computes no keys or values and attends
	// over those layer From (an earlier one that keeps a cache, of the
	// same window) stores in the same forward pass.
	Shares bool
	From   int
}

// CheckShared reports a layer that shares another's keys and values where
// it cannot: a layer not before it, one that keeps no cache of its own,
// or one with another window.
func CheckShared(specs []CacheSpec) error {
	for i, s := range specs {
		if !s.Shares {
			continue
		}
		switch {
		case s.From < 0 || s.From >= i:
			return fmt.Errorf("nn: layer %d reads the keys and values of layer %d, which is not before it", i, s.From)
		case specs[s.From].None:
			return fmt.Errorf("nn: layer %d reads the keys and values of layer %d, which keeps none of its own", i, s.From)
		case specs[s.From].Window != s.Window || len(specs[s.From].Parts) > 0 || specs[s.From].States > 0:
			return fmt.Errorf("nn: layer %d reads the keys and values of layer %d, whose attention is of another kind", i, s.From)
		}
	}
	return nil
}

// NewCaches makes one empty cache per layer spec, as opts choose: a full
// cache on full-attention layers, a window cache on sliding ones, slots on
// recurrent ones (which opts' bounds and quantization do not touch: a
// state does not grow), a list of those on layers that keep several.
func NewCaches(specs []CacheSpec, opts kv.Options) ([]kv.Cache, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	caches := make([]kv.Cache, 0, len(specs))
	for _, s := range specs {
		if !s.None {
			caches = append(caches, newCache(s, opts))
		}
	}
	return caches, nil
}

func newCache(s CacheSpec, opts kv.Options) kv.Cache {
	switch {
	case s.Encoder:
		return kv.NewEncoding(nil, nil)
	case len(s.Parts) > 0:
		parts := make([]kv.Cache, len(s.Parts))
		for i, p := range s.Parts {
			parts[i] = newCache(p, opts)
		}
		return kv.NewList(parts...)
	case s.States > 0:
		return kv.NewStates(s.States)
	case s.Window > 0:
		return opts.Sliding(s.Window)
	}
	return opts.Full()
}

// EncoderCaches are the specs of an encoder's n layers (structure.encoder):
// each attends over its whole input at once and keeps nothing.
func EncoderCaches(n int) []CacheSpec {
	specs := make([]CacheSpec, n)
	for i := range specs {
		specs[i].Encoder = true
	}
	return specs
}

// DefaultCaches is NewCaches with mlx-lm's default caches (the zero
// kv.Options, which are always valid), holding keys and values in p's
// CacheDtype.
func DefaultCaches(specs []CacheSpec, p *Params) []kv.Cache {
	caches, _ := NewCaches(specs, p.CacheOptions(kv.Options{}))
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

// LayerCaches is caches, one per layer that keeps one (specs' layers
// without None, in order), spread over every layer: nil at a layer that
// keeps none, and a kv.Reader of its owner's at a layer that shares an
// earlier layer's keys and values (whose cache is then a kv.Owner). A
// list of another length is recorded on g, and stand-ins let the forward
// pass finish building (and fail at Eval with that error).
func LayerCaches(g *mlx.Graph, caches []kv.Cache, specs []CacheSpec) []kv.Cache {
	n := 0
	for _, s := range specs {
		if !s.None {
			n++
		}
	}
	out := make([]kv.Cache, len(specs))
	if len(caches) != n {
		g.Failf("nn: %d caches for the %d layers that keep one (make them with NewCaches)", len(caches), n)
		for i := range out {
			out[i] = failedCache{}
		}
	} else {
		k := 0
		for i, s := range specs {
			if !s.None {
				out[i] = caches[k]
				k++
			}
		}
	}
	for i, s := range specs {
		if !s.Shares || s.From < 0 || s.From >= i {
			continue // CheckShared refused such a model at load
		}
		o, ok := out[s.From].(*kv.Owner)
		if !ok {
			o = kv.NewOwner(out[s.From])
			out[s.From] = o
		}
		out[i] = kv.NewReader(o)
	}
	return out
}

// FeedForward is a feed-forward block as a layer's sublayer in a single
// block, where the token mixers' signature is wanted: it reads no mask
// and no cache.
func FeedForward(forward func(*mlx.Graph, *mlx.Array) *mlx.Array) func(*mlx.Graph, *mlx.Array, mlx.AttentionMask, kv.Cache) *mlx.Array {
	return func(g *mlx.Graph, x *mlx.Array, _ mlx.AttentionMask, _ kv.Cache) *mlx.Array { return forward(g, x) }
}

// Mixer is a token mixer's forward: x normed, the mask and the layer's
// cache in, its output out.
type Mixer = func(*mlx.Graph, *mlx.Array, mlx.AttentionMask, kv.Cache) *mlx.Array

// ResidualMixer is a layer's mixing added to the residual stream: x and x
// normed in, the new stream out.
type ResidualMixer = func(g *mlx.Graph, x, normed *mlx.Array, mask mlx.AttentionMask, c kv.Cache) *mlx.Array

// Beside is two token mixers run on one normed input, each output added
// to the residual stream in turn ((x + first) + second, as mlx-lm sums
// them): a layer whose cache is a kv.List of the first's cache and the
// second's (Falcon-H1's state-space scan beside attention).
func Beside(first, second Mixer) ResidualMixer {
	return func(g *mlx.Graph, x, normed *mlx.Array, mask mlx.AttentionMask, c kv.Cache) *mlx.Array {
		l, ok := c.(*kv.List)
		if !ok || l.Parts() != 2 {
			g.Failf("nn: a layer of two token mixers needs a list of two caches, got %T (make the caches with the model's NewCaches)", c)
			return x
		}
		return g.Add(g.Add(x, first(g, normed, mask, l.Part(0))), second(g, normed, mask, l.Part(1)))
	}
}

// Residual is one token mixer as a ResidualMixer: x + mix(normed).
func Residual(mix Mixer) ResidualMixer {
	return func(g *mlx.Graph, x, normed *mlx.Array, mask mlx.AttentionMask, c kv.Cache) *mlx.Array {
		return g.Add(x, mix(g, normed, mask, c))
	}
}

// failedCache stands in for a missing cache in a graph that has failed.
type failedCache struct{}

func (failedCache) Offset() int { return 0 }

func (failedCache) Update(g *mlx.Graph, k, v *mlx.Array) kv.KV {
	return kv.KV{Keys: k, Values: v}
}

func (failedCache) Mask(*mlx.Graph, int, int, bool) mlx.AttentionMask { return mlx.NoMask }

func (failedCache) Trim(int) int { return 0 }

func (failedCache) Trimmable() bool { return false }

func (failedCache) Nbytes() int { return 0 }

func (failedCache) Free() {}

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
