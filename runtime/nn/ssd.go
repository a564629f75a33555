package nn

import (
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// The state-space mixer of Mamba2 and the hybrids built on it: one
// projection gives an output gate z, the convolution's input (x, B and C
// side by side) and a time step per head; x, B and C pass a short causal
// convolution and a silu, the scan (mlx.Graph.SSMScan) runs each head's
// state over the steps, and the output, gated by silu(z), is normed.

// SSDHeads are a state-space mixer's shape: Heads of HeadDim channels
// reading Groups groups of B and C, each of StateSize.
type SSDHeads struct {
	Heads, HeadDim, Groups, StateSize int
}

// Width is the heads' channels side by side: the gate's and the output's
// width.
func (h SSDHeads) Width() int { return h.Heads * h.HeadDim }

// ConvWidth is the convolution's width: x, B and C side by side.
func (h SSDHeads) ConvWidth() int { return h.Width() + 2*h.Groups*h.StateSize }

// ProjWidth is the input projection's width: z, then x, B and C, then the
// time steps.
func (h SSDHeads) ProjWidth() int { return h.Width() + h.ConvWidth() + h.Heads }

// SSD runs the mixer's middle on in_proj's output proj [B, L, ProjWidth]:
// the convolution keeps its last inputs in slot 0 of s, the scan its state
// (float32 [B, heads, HeadDim, StateSize]) in slot 1. It returns the scan's
// output y [B, L, Width] and the gate z [B, L, Width].
func SSD(g *mlx.Graph, s *kv.States, proj *mlx.Array, conv *ShortConv, scan *mlx.SSM, h SSDHeads) (y, z *mlx.Array) {
	B, L := proj.Dim(0), proj.Dim(1)
	w := h.Width()
	parts := g.SplitAt(proj, []int{w, w + h.ConvWidth()}, -1)
	xbc := g.SiLU(conv.Apply(g, s, 0, parts[1]))
	gn := h.Groups * h.StateSize
	in := g.SplitAt(xbc, []int{w, w + gn}, -1)
	x := g.Reshape(in[0], B, L, h.Heads, h.HeadDim)
	b := g.Reshape(in[1], B, L, h.Groups, h.StateSize)
	c := g.Reshape(in[2], B, L, h.Groups, h.StateSize)
	// In half precision the scan is the chunked form mlx-lm composes: its
	// roundings (C·Bᵀ and each chunk's output in the activations' dtype)
	// are part of the result, which a routed block downstream picks its
	// experts from. In float32 archgen's kernel runs it, within float32
	// rounding of that form.
	run := g.SSMScan
	if x.Dtype() != mlx.Float32 {
		run = g.SSMScanOps
	}
	y, last := run(x, b, c, parts[2], s.Slot(1), scan)
	s.SetSlot(g, 1, last)
	return g.Reshape(y, B, L, w), parts[0]
}

// SSDOutput is the state-space mixers' output: silu(z) times y (in y's
// dtype), then normed (gateThenNorm); or, with before, y normed and then
// gated; or, without a norm, gated alone.
func SSDOutput(g *mlx.Graph, norm *RMSNorm, y, z *mlx.Array, groups int, before bool) *mlx.Array {
	switch {
	case norm == nil:
		return g.SwiGLU(z, y)
	case before:
		return g.SwiGLU(z, norm.Apply(g, y))
	}
	return gateThenNorm(g, norm, y, z, groups)
}

// gateThenNorm is silu(z) times y, then RMSNorm over the full width
// (groups 1), or over each of groups equal parts of it without the
// weight, the weight applied after.
func gateThenNorm(g *mlx.Graph, norm *RMSNorm, y, z *mlx.Array, groups int) *mlx.Array {
	x := g.SwiGLU(z, y)
	if groups <= 1 {
		return norm.Apply(g, x)
	}
	shape := x.Shape()
	per := g.Reshape(x, append(shape[:len(shape)-1:len(shape)-1], groups, shape[len(shape)-1]/groups)...)
	x = g.Reshape(g.RMSNorm(per, nil, norm.Eps), shape...)
	return g.Multiply(norm.Weight, x)
}
