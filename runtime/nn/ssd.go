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
// reading Groups groups of B and C, each of StateSize. Separate is the
// layout whose input projection gives z and x alone (SSDSplit).
type SSDHeads struct {
	Heads, HeadDim, Groups, StateSize int
	Separate                          bool
}

// Width is the heads' channels side by side: the gate's and the output's
// width.
func (h SSDHeads) Width() int { return h.Heads * h.HeadDim }

// ConvWidth is the convolution's width: x, B and C side by side, or x
// alone in the separate layout.
func (h SSDHeads) ConvWidth() int {
	if h.Separate {
		return h.Width()
	}
	return h.Width() + 2*h.Groups*h.StateSize
}

// ProjWidth is the input projection's width: z, then x, B and C, then the
// time steps; in the separate layout, z and x of each head in turn.
func (h SSDHeads) ProjWidth() int {
	if h.Separate {
		return 2 * h.Width()
	}
	return h.Width() + h.ConvWidth() + h.Heads
}

// SSDSplit are the separate layout's modules after the convolution: BCDt
// gives B and C (StateSize each, one group) and the time-step input (the
// rest of its width) from the convolved x, each RMSNormed by its own
// weight (eps Eps); Dt widens the time-step input to one per head.
type SSDSplit struct {
	BCDt, Dt             *Linear
	BNorm, CNorm, DtNorm *mlx.Array
	Eps                  float32
}

// SSDSplit loads the separate layout's modules under the mixer's name:
// bcdt_proj, dt_proj (neither with a bias) and the three norms' bare
// weights, B_norm_weight, C_norm_weight and dt_norm_weight.
func (w *Weights) SSDSplit(name string, h SSDHeads, dtRank int, eps float64) *SSDSplit {
	gn := h.StateSize // one group (the generator holds the layout to it)
	return &SSDSplit{
		BCDt:   w.Linear(name+".bcdt_proj", 2*gn+dtRank, h.Width(), false),
		Dt:     w.Linear(name+".dt_proj", h.Heads, dtRank, false),
		BNorm:  w.Vector(name+".B_norm_weight", h.StateSize),
		CNorm:  w.Vector(name+".C_norm_weight", h.StateSize),
		DtNorm: w.Vector(name+".dt_norm_weight", dtRank),
		Eps:    float32(eps),
	}
}

// SSD runs the mixer's middle on in_proj's output proj [B, L, ProjWidth]:
// the convolution keeps its last inputs in slot 0 of s, the scan its state
// (float32 [B, heads, HeadDim, StateSize]) in slot 1. It returns the scan's
// output y [B, L, Width] and the gate z [B, L, Width].
func SSD(g *mlx.Graph, s *kv.States, proj *mlx.Array, conv *ShortConv, scan *mlx.SSM, h SSDHeads) (y, z *mlx.Array) {
	B, L := proj.Dim(0), proj.Dim(1)
	w := h.Width()
	parts := g.SplitAt(proj, []int{w, w + h.ConvWidth()}, -1)
	xbc := conv.ApplySiLU(g, s, 0, parts[1])
	gn := h.Groups * h.StateSize
	in := g.SplitAt(xbc, []int{w, w + gn}, -1)
	x := g.Reshape(in[0], B, L, h.Heads, h.HeadDim)
	b := g.Reshape(in[1], B, L, h.Groups, h.StateSize)
	c := g.Reshape(in[2], B, L, h.Groups, h.StateSize)
	y = ssdScan(g, s, x, b, c, parts[2], scan)
	return g.Reshape(y, B, L, w), parts[0]
}

// ssdScan runs the scan from the state in slot 1 of s and keeps the last
// one there. In half precision the scan is the chunked form mlx-lm
// composes: its roundings (C·Bᵀ and each chunk's output in the
// activations' dtype) are part of the result, which a routed block
// downstream picks its experts from. In float32 archgen's kernel runs it,
// within float32 rounding of that form.
func ssdScan(g *mlx.Graph, s *kv.States, x, b, c, dt *mlx.Array, scan *mlx.SSM) *mlx.Array {
	run := g.SSMScan
	if x.Dtype() != mlx.Float32 {
		run = g.SSMScanOps
	}
	y, last := run(x, b, c, dt, s.Slot(1), scan)
	s.SetSlot(g, 1, last)
	return y
}

// SSDSeparate is SSD for the separate layout: proj [B, L, 2 Width] holds
// z then x for each head in turn; x alone passes the convolution (slot 0)
// and a silu, and sp makes B, C and the time steps from it. The scan and
// its state (slot 1) are SSD's.
func SSDSeparate(g *mlx.Graph, s *kv.States, proj *mlx.Array, conv *ShortConv, sp *SSDSplit, scan *mlx.SSM, h SSDHeads) (y, z *mlx.Array) {
	B, L := proj.Dim(0), proj.Dim(1)
	w := h.Width()
	zx := g.SplitAt(g.Reshape(proj, B, L, h.Heads, 2*h.HeadDim), []int{h.HeadDim}, -1)
	xc := conv.ApplySiLU(g, s, 0, g.Reshape(zx[1], B, L, w))
	gn := h.Groups * h.StateSize
	bcdt := g.SplitAt(sp.BCDt.Apply(g, xc), []int{gn, 2 * gn}, -1)
	b := g.Reshape(g.RMSNorm(bcdt[0], sp.BNorm, sp.Eps), B, L, h.Groups, h.StateSize)
	c := g.Reshape(g.RMSNorm(bcdt[1], sp.CNorm, sp.Eps), B, L, h.Groups, h.StateSize)
	dt := sp.Dt.Apply(g, g.RMSNorm(bcdt[2], sp.DtNorm, sp.Eps))
	y = ssdScan(g, s, g.Reshape(xc, B, L, h.Heads, h.HeadDim), b, c, dt, scan)
	return g.Reshape(y, B, L, w), g.Reshape(zx[0], B, L, w)
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
	return GroupRMSNorm(g, norm, g.SwiGLU(z, y), groups)
}
