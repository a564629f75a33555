package nn

import (
	"math"

	"github.com/archgen/archgen/runtime/mlx"
)

// Per-layer inputs: besides the residual stream, each layer reads a small
// vector of its own for each token, made once before the first layer from
// two sources: a row of a wide embedding table (width values for every
// layer, side by side) and a projection of the token's scaled embedding,
// normed per layer. A gate in each layer mixes its vector into the stream.

// PerLayerInputs makes every layer's input vectors. A nil PerLayerInputs
// (a config without them) makes none.
type PerLayerInputs struct {
	Table  *Embedding // [vocab, layers * width]
	Proj   *Linear    // hidden -> layers * width
	Norm   Normalizer // over each layer's width
	Layers int
	Width  int
	Hidden int
}

// Apply is the layers' inputs [B, L, layers, width] for tokens [B, L] and
// their scaled embeddings h [B, L, hidden]: (norm(proj(h) / sqrt(hidden))
// + table[tokens] * sqrt(width)) / sqrt(2), each product taken in h's
// dtype. Nil for a nil p.
func (p *PerLayerInputs) Apply(g *mlx.Graph, tokens, h *mlx.Array) *mlx.Array {
	if p == nil {
		return nil
	}
	B, L := h.Dim(0), h.Dim(1)
	rows := g.MultiplyScalar(p.Table.Apply(g, tokens), math.Sqrt(float64(p.Width)))
	rows = g.Reshape(rows, B, L, p.Layers, p.Width)
	proj := g.MultiplyScalar(p.Proj.Apply(g, h), 1/math.Sqrt(float64(p.Hidden)))
	proj = p.Norm.Apply(g, g.Reshape(proj, B, L, p.Layers, p.Width))
	return g.MultiplyScalar(g.Add(proj, rows), 1/math.Sqrt2)
}

// Layer is layer i's inputs [B, L, width] of all (Apply's); nil for nil.
func (p *PerLayerInputs) Layer(g *mlx.Graph, all *mlx.Array, i int) *mlx.Array {
	if p == nil || all == nil {
		return nil
	}
	B, L := all.Dim(0), all.Dim(1)
	return g.Reshape(g.Slice(all, []int{0, 0, i, 0}, []int{B, L, i + 1, p.Width}), B, L, p.Width)
}

// PerLayerGate mixes a layer's input vector into the stream after the
// layer's sublayers: h + norm(proj(gelu(gate(h)) * input)), with the
// tanh-approximate GELU. A nil PerLayerGate, or a nil input, leaves h as
// it is.
type PerLayerGate struct {
	Gate *Linear // hidden -> width
	Proj *Linear // width -> hidden
	Norm Normalizer
}

// Apply is h with in [B, L, width] mixed in.
func (p *PerLayerGate) Apply(g *mlx.Graph, h, in *mlx.Array) *mlx.Array {
	if p == nil || in == nil {
		return h
	}
	x := g.Multiply(g.GELUApprox(p.Gate.Apply(g, h)), in)
	return g.Add(h, p.Norm.Apply(g, p.Proj.Apply(g, x)))
}
