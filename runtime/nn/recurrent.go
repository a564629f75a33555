package nn

import (
	"fmt"
	"math"
	"slices"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// The parts the recurrent token mixers share: a layer's state cache, the
// short causal convolution that keeps its last inputs, and the gated
// output norm.

// StatesOf is c as the state cache of a recurrent layer. Handed another
// kind of cache it records the mismatch on g and returns an empty stand-in
// of n slots, so the forward pass still builds (and fails at Eval).
func StatesOf(g *mlx.Graph, c kv.Cache, n int) *kv.States {
	if s, ok := c.(*kv.States); ok && s.Slots() == n {
		return s
	}
	g.Failf("nn: a recurrent layer needs a state cache of %d slots, got %T (make the caches with the model's NewCaches)", n, c)
	return kv.NewStates(n)
}

// LayerMask is the attention mask of L new tokens, made by the cache of
// layer i (the first layer that attends), or no mask when no layer does
// (i < 0).
func LayerMask(g *mlx.Graph, caches []kv.Cache, i, L int, array bool) mlx.AttentionMask {
	if i < 0 || i >= len(caches) {
		return mlx.NoMask
	}
	return caches[i].Mask(g, L, 0, array)
}

// FirstLayer is first, or i when there is none yet (first < 0).
func FirstLayer(first, i int) int {
	if first < 0 {
		return i
	}
	return first
}

// ShortConv is a depthwise causal convolution over a few steps: Weight
// [channels, kernel, 1] as MLX's conv1d stores a depthwise kernel, Bias
// [channels] or nil. Its state is the kernel - 1 inputs before the new
// ones.
type ShortConv struct {
	Weight, Bias *mlx.Array
	// Taps is the weight as the float32 kernel reads it, [kernel,
	// channels]: each tap's weights over the channels. Loading makes it
	// where the weight is float32 and the kernel spans more than one step,
	// and then keeps it in place of Weight (nil; the composed ops read the
	// taps transposed), so that the weights are held once; elsewhere
	// (half-precision weights, which the composed ops read) it is nil.
	Taps   *mlx.Array
	Kernel int
}

// ShortConv reads a short convolution's weight name.weight (and
// name.bias), [channels, kernel, 1], or [channels, 1, kernel] as Hugging
// Face's checkpoints store it (moved to MLX's order, as mlx-lm's sanitize
// does).
func (w *Weights) ShortConv(name string, channels, kernel int, bias bool) *ShortConv {
	c := &ShortConv{Kernel: kernel}
	shape := []int{channels, kernel, 1}
	if w.l.record {
		w.spec(name+".weight", shape, nil, false)
		if bias {
			w.spec(name+".bias", []int{channels}, nil, false)
		}
		return c
	}
	full := w.prefix + name + ".weight"
	if a, ok := w.l.tensors[full]; ok && kernel != 1 && slices.Equal(a.Shape(), []int{channels, 1, kernel}) {
		t := w.l.g.Contiguous(w.l.g.Transpose(a, 0, 2, 1))
		if err := w.l.g.Err(); err != nil {
			w.failf("%s: moving the kernel axis: %v", w.local(name+".weight"), err)
		} else {
			w.l.g.Keep(t)
			w.l.scratch = append(w.l.scratch, a)
			w.l.tensors[full] = t
		}
	}
	c.Weight = w.param(name+".weight", shape, false)
	if bias {
		c.Bias = w.param(name+".bias", []int{channels}, false)
	}
	if c.Weight != nil && c.Weight.Dtype() == mlx.Float32 && kernel > 1 {
		g := w.l.g
		t := g.Contiguous(g.Transpose(g.Reshape(c.Weight, channels, kernel), 1, 0))
		if err := g.Err(); err != nil {
			w.failf("%s: its taps: %v", w.local(name+".weight"), err)
		} else {
			g.Keep(t)
			// the taps stand for the weight: it goes when loading ends
			if p := &w.l.params.arrays; slices.Contains(*p, c.Weight) {
				*p = slices.DeleteFunc(*p, func(a *mlx.Array) bool { return a == c.Weight })
				w.l.scratch = append(w.l.scratch, c.Weight)
				c.Weight = nil
			}
			c.Taps = w.keep(t)
		}
	}
	return c
}

// weight is the convolution's weight [channels, kernel, 1], from the taps
// where loading kept only them.
func (c *ShortConv) weight(g *mlx.Graph) *mlx.Array {
	if c.Weight != nil || c.Taps == nil {
		return c.Weight
	}
	return g.ExpandDims(g.Transpose(c.Taps, 1, 0), 2)
}

// Apply convolves x [B, L, channels] after the state in slot of s (zeros
// for a fresh sequence), keeps the last kernel - 1 inputs there, and
// returns [B, L, channels].
func (c *ShortConv) Apply(g *mlx.Graph, s *kv.States, slot int, x *mlx.Array) *mlx.Array {
	return c.apply(g, s, slot, x, false)
}

// ApplySiLU is silu(Apply(...)): the convolution and its activation, one
// op in float32.
func (c *ShortConv) ApplySiLU(g *mlx.Graph, s *kv.States, slot int, x *mlx.Array) *mlx.Array {
	return c.apply(g, s, slot, x, true)
}

func (c *ShortConv) apply(g *mlx.Graph, s *kv.States, slot int, x *mlx.Array, silu bool) *mlx.Array {
	B, L, C := x.Dim(0), x.Dim(1), x.Dim(2)
	keep := c.Kernel - 1
	state := s.Slot(slot)
	if state == nil {
		state = g.Zeros([]int{B, keep, C}, x.Dtype())
	}
	if keep > 0 && c.Taps != nil && allFloat32(x, c.Taps) && (c.Bias == nil || c.Bias.Dtype() == mlx.Float32) {
		// In float32 (the CPU's default compute) one op reads the state,
		// x and the taps where they are and writes the output and the
		// next state, within float32 rounding of the ops below.
		y, next := g.ConvStep(x, state, c.Taps, c.Bias, silu)
		s.SetSlot(g, slot, next)
		return y
	}
	in := g.Concatenate(1, state, x) // [B, keep + L, C]
	s.SetSlot(g, slot, g.Contiguous(g.Slice(in, []int{0, L, 0}, []int{B, keep + L, C})))
	y := g.Conv1D(in, c.weight(g), 1, 0, 1, C)
	if c.Bias != nil {
		y = g.Add(y, c.Bias)
	}
	if silu {
		y = g.SiLU(y)
	}
	return y
}

// DecayRate reads a recurrence's per-head log decay name [n] and returns
// -exp(it) in float32, once at load, as the decay's every step uses it:
// the stored values are widened to float32 as they are (not first cast to
// the compute dtype), as mlx-lm widens A_log.
func (w *Weights) DecayRate(name string, n int) *mlx.Array {
	if w.l.record {
		w.spec(name, []int{n}, nil, false)
		return nil
	}
	raw := w.lookup(name, []int{n}, false)
	if raw == nil {
		return nil
	}
	return w.negExp(name, w.l.g.AsType(raw, mlx.Float32))
}

// Decay reads a recurrence's log decay name of the given shape (Mamba's
// A_log [inner, state]) and returns -exp(it) in the compute dtype, once at
// load, as every step uses it (mlx-lm computes it from A_log as loaded).
func (w *Weights) Decay(name string, shape ...int) *mlx.Array {
	if w.l.record {
		w.spec(name, shape, nil, false)
		return nil
	}
	a := w.take(name, shape, false)
	if a == nil {
		return nil
	}
	return w.negExp(name, a)
}

// negExp is -exp(a), made and kept as the parameter that stands for name.
func (w *Weights) negExp(name string, a *mlx.Array) *mlx.Array {
	g := w.l.g
	r := g.Negative(g.Exp(a))
	if err := g.Err(); err != nil {
		w.failf("%s: %v", w.local(name), err)
		return nil
	}
	g.Keep(r)
	return w.keep(r)
}

// DeltaHeads are a gated-delta mixer's shape: key heads of KeyDim, value
// heads of ValueDim (a multiple of the key heads).
type DeltaHeads struct {
	KeyHeads, ValueHeads, KeyDim, ValueDim int
	// NegEigval: the write strength is 2 sigmoid(b), in [0, 2] (OLMo
	// hybrid's allow_neg_eigval).
	NegEigval bool
	// Tiled: value head h reads key head h mod KeyHeads (the order
	// llama.cpp's GGUF files hold the value heads in), not h / (ValueHeads
	// / KeyHeads).
	Tiled bool
}

// ConvWidth is the width the convolution runs over: q, k and v side by side.
func (h DeltaHeads) ConvWidth() int { return 2*h.KeyHeads*h.KeyDim + h.ValueHeads*h.ValueDim }

// ValueWidth is the value heads' width side by side.
func (h DeltaHeads) ValueWidth() int { return h.ValueHeads * h.ValueDim }

// DeltaInputs are a gated-delta mixer's projections, laid out: QKV [B, L,
// ConvWidth] for the convolution, Z [B, L, value heads, ValueDim] the
// output gate, B and A [B, L, value heads] the write strength and the
// decay's input.
type DeltaInputs struct {
	QKV, Z, B, A *mlx.Array
}

// GroupedDeltaInputs lays out projections grouped by key head (Qwen3-Next's
// in_proj_qkvz and in_proj_ba): per key head, qkvz holds [q | k | v | z]
// (v and z for the value heads of the group) and ba [b | a].
func GroupedDeltaInputs(g *mlx.Graph, qkvz, ba *mlx.Array, h DeltaHeads) DeltaInputs {
	B, L := qkvz.Dim(0), qkvz.Dim(1)
	r := h.ValueHeads / h.KeyHeads
	parts := g.SplitAt(g.Reshape(qkvz, B, L, h.KeyHeads, -1), []int{h.KeyDim, 2 * h.KeyDim, 2*h.KeyDim + r*h.ValueDim}, -1)
	bas := g.SplitAt(g.Reshape(ba, B, L, h.KeyHeads, -1), []int{r}, -1)
	return DeltaInputs{
		QKV: g.Concatenate(-1,
			g.Reshape(parts[0], B, L, -1),
			g.Reshape(parts[1], B, L, -1),
			g.Reshape(parts[2], B, L, -1)),
		Z: g.Reshape(parts[3], B, L, -1, h.ValueDim),
		B: g.Reshape(bas[0], B, L, h.ValueHeads),
		A: g.Reshape(bas[1], B, L, h.ValueHeads),
	}
}

// FlatDeltaInputs lays out separate projections (Qwen3.5's in_proj_qkv,
// in_proj_z, in_proj_b, in_proj_a): qkv is already [q | k | v].
func FlatDeltaInputs(g *mlx.Graph, qkv, z, b, a *mlx.Array, h DeltaHeads) DeltaInputs {
	B, L := qkv.Dim(0), qkv.Dim(1)
	return DeltaInputs{QKV: qkv, Z: g.Reshape(z, B, L, h.ValueHeads, h.ValueDim), B: b, A: a}
}

// GatedDelta runs the gated delta rule over the convolved qkv [B, L,
// ConvWidth]: q and k are normalised to unit length (q also scaled by
// KeyDim^-1/2), the write strength is sigmoid(b), the decay exp(rate
// softplus(a + dtBias)) in float32 (rate is -exp(A_log), DecayRate), and the state (float32 [B, value heads,
// ValueDim, KeyDim]) is read from and written back to slot of s. It
// returns y [B, L, value heads, ValueDim].
func GatedDelta(g *mlx.Graph, s *kv.States, slot int, qkv, b, a, rate, dtBias *mlx.Array, h DeltaHeads) *mlx.Array {
	B, L := qkv.Dim(0), qkv.Dim(1)
	if h.Tiled && h.ValueHeads > h.KeyHeads {
		qkv, h = tileKeyHeads(g, qkv, h)
	}
	if allFloat32(qkv, b, a, dtBias) {
		// In float32 (the CPU's default compute) one op takes the
		// projections' outputs as they are: the norms, gates and rule
		// within float32 rounding of the steps below, composed.
		state := s.Slot(slot)
		if state == nil {
			state = g.Zeros([]int{B, h.ValueHeads, h.ValueDim, h.KeyDim}, mlx.Float32)
		}
		y, last := g.GatedDeltaGates(qkv, b, a, rate, dtBias, state, nil,
			mlx.DeltaShape{Hk: h.KeyHeads, Dk: h.KeyDim, Hv: h.ValueHeads, Dv: h.ValueDim}, h.NegEigval)
		s.SetSlot(g, slot, last)
		return y
	}
	kd := h.KeyHeads * h.KeyDim
	parts := g.SplitAt(qkv, []int{kd, 2 * kd}, -1)
	q := g.Reshape(parts[0], B, L, h.KeyHeads, h.KeyDim)
	k := g.Reshape(parts[1], B, L, h.KeyHeads, h.KeyDim)
	v := g.Reshape(parts[2], B, L, h.ValueHeads, h.ValueDim)
	// Unit length with the reference's eps of 1e-6 on the sum of squares:
	// rms_norm adds its eps to the mean, so it takes eps / KeyDim.
	inv := 1 / math.Sqrt(float64(h.KeyDim))
	eps := float32(1e-6 * inv * inv)
	q = g.MultiplyScalar(g.RMSNorm(q, nil, eps), inv*inv)
	k = g.MultiplyScalar(g.RMSNorm(k, nil, eps), inv)
	beta := g.Sigmoid(b)
	if h.NegEigval {
		beta = g.MultiplyScalar(beta, 2)
	}
	decay := g.Exp(g.Multiply(rate, g.Softplus(g.Add(a, dtBias))))
	state := s.Slot(slot)
	if state == nil {
		state = g.Zeros([]int{B, h.ValueHeads, h.ValueDim, h.KeyDim}, mlx.Float32)
	}
	y, last := g.GatedDelta(q, k, v, decay, beta, state, nil)
	s.SetSlot(g, slot, last)
	return y
}

// tileKeyHeads repeats q's and k's heads in turn, as many times as there
// are value heads to each key head ([k0 k1 k0 k1] for two of each), so
// that value head h reads copy h, key head h mod KeyHeads, by the rule's
// grouped reading (one key head a value head).
func tileKeyHeads(g *mlx.Graph, qkv *mlx.Array, h DeltaHeads) (*mlx.Array, DeltaHeads) {
	kd := h.KeyHeads * h.KeyDim
	parts := g.SplitAt(qkv, []int{kd, 2 * kd}, -1)
	r := h.ValueHeads / h.KeyHeads
	tile := func(x *mlx.Array) []*mlx.Array {
		xs := make([]*mlx.Array, r)
		for i := range xs {
			xs[i] = x
		}
		return xs
	}
	q := g.Concatenate(-1, tile(parts[0])...)
	k := g.Concatenate(-1, tile(parts[1])...)
	h.KeyHeads, h.Tiled = h.ValueHeads, false
	return g.Concatenate(-1, q, k, parts[2]), h
}

// allFloat32 reports whether every array is float32.
func allFloat32(xs ...*mlx.Array) bool {
	for _, x := range xs {
		if x.Dtype() != mlx.Float32 {
			return false
		}
	}
	return true
}

// GatedNorm is the recurrent mixers' output norm: norm(y) times silu(z),
// the product taken in float32 and cast back to y's dtype.
func GatedNorm(g *mlx.Graph, norm *RMSNorm, y, z *mlx.Array) *mlx.Array {
	if allFloat32(y, z) && (norm.Weight == nil || norm.Weight.Dtype() == mlx.Float32) {
		return g.GatedRMSNorm(y, norm.Weight, z, norm.Eps) // one op, within float32 rounding of the steps below
	}
	x := norm.Apply(g, y)
	return g.AsType(g.Multiply(g.SiLU(g.AsType(z, mlx.Float32)), g.AsType(x, mlx.Float32)), y.Dtype())
}

// OneMixer is nil when at most one of a layer's mixer kinds claims layer i,
// and otherwise names the kinds (listed in names, by claims' order) that
// do.
func OneMixer(i int, names string, claims []bool) error {
	n := 0
	for _, c := range claims {
		if c {
			n++
		}
	}
	if n <= 1 {
		return nil
	}
	return fmt.Errorf("layer %d: more than one token mixer claims it (of %s, %d do): the config's layer pattern is inconsistent", i, names, n)
}

// LayerWindowMask is the attention mask of L new tokens within window
// positions (0: every position), made by the cache of layer i, or no mask
// when no layer is of that kind (i < 0).
func LayerWindowMask(g *mlx.Graph, caches []kv.Cache, i, L, window int, array bool) mlx.AttentionMask {
	if i < 0 || i >= len(caches) {
		return mlx.NoMask
	}
	return caches[i].Mask(g, L, window, array)
}
