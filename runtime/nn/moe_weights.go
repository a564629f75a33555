package nn

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// Routes records that the model routes tokens to experts (a sparse
// layer): its caches then hold keys and values as computed, float32 under
// float32 compute (see Params.CacheDtype).
func (w *Weights) Routes() { w.l.routes = true }

// RouterNorm is a router's input norm: its learned scale, the vector name
// [dims], times factor, with eps.
func (w *Weights) RouterNorm(name string, dims int, factor, eps float64) *RouterNorm {
	return &RouterNorm{Scale: w.Vector(name, dims), Factor: factor, Eps: eps}
}

// Experts is the stacked experts name: weight [n, out, in], dense or
// quantized, and a bias [n, out] when bias is set.
//
// When the model is loaded over a group and the shard plan gives name a
// role, out and in are this process's share, as for Linear: each expert's
// rows (AllToSharded) or columns (ShardedToAll) are split, and a
// sharded-to-all stack's outputs are partial sums (Sum is the group).
func (w *Weights) Experts(name string, n, out, in int, bias bool) *Experts {
	if role := w.role(name); role != Replicated {
		return w.shardedExperts(name, n, out, in, bias, role)
	}
	e := &Experts{}
	q := w.quantFor(name, in)
	if w.l.record {
		w.spec(name+".weight", []int{n, out, in}, q, false)
		if bias {
			w.spec(name+".bias", []int{n, out}, nil, false)
		}
		return e
	}
	switch {
	case q == badQuant:
	case q != nil && mlx.IsBlockMode(q.Mode):
		if in%q.GroupSize != 0 {
			w.badQuant(name, "%s: %d columns are not whole blocks of %d values (%s)", w.local(name), in, q.GroupSize, q.Mode)
			break
		}
		if weight := w.blocks(name+".weight", []int{n, out, q.PackedDims(in)}); weight != nil {
			e.Q = &mlx.Quantized{Weight: weight, GroupSize: q.GroupSize, Bits: q.Bits, Mode: q.Mode}
		}
	case q != nil:
		if in%q.GroupSize != 0 {
			w.badQuant(name, "%s: %d columns do not split into groups of %d", w.local(name), in, q.GroupSize)
			break
		}
		w.markScales(name, q)
		weight := w.param(name+".weight", []int{n, out, q.PackedDims(in)}, true)
		// scales and biases as Linear keeps them: half precision stays
		// as stored under float32 compute (the kernels widen it)
		scales := w.matrix(name+".scales", []int{n, out, in / q.GroupSize})
		var biases *mlx.Array
		if q.affine() {
			biases = w.matrix(name+".biases", []int{n, out, in / q.GroupSize})
		}
		if weight != nil && scales != nil && (biases != nil || !q.affine()) {
			e.Q = &mlx.Quantized{Weight: weight, Scales: scales, Biases: biases, GroupSize: q.GroupSize, Bits: q.Bits, Mode: q.Mode}
		}
	default:
		e.Weight = w.param(name+".weight", []int{n, out, in}, false)
	}
	if bias {
		e.Bias = w.param(name+".bias", []int{n, out}, false)
	}
	return e
}

// shardedExperts is Experts for a stack the plan splits: this process
// reads its block of every expert.
func (w *Weights) shardedExperts(name string, n, out, in int, bias bool, role ShardRole) *Experts {
	grp := w.l.opts.Group
	size, r := grp.Size(), grp.Rank()
	full := [2]int{out, in}
	axis := 1
	if role == ShardedToAll {
		axis = 2
	}
	full[axis-1] *= size
	e := &Experts{}
	q := w.quantFor(name, full[1])
	switch {
	case q == badQuant:
	case q != nil && mlx.IsBlockMode(q.Mode):
		w.badQuant(name, "%s: %s: block-quantized experts split over a group are not supported", w.local(name), q.Mode)
	case q != nil:
		if full[1]%q.GroupSize != 0 || (axis == 2 && (full[1]/q.GroupSize)%size != 0) {
			w.badQuant(name, "%s: %v", w.local(name), &ShardError{Size: size, Msg: fmt.Sprintf(
				"its %d input columns make quantization groups of %d that do not split evenly", full[1], q.GroupSize)})
			break
		}
		w.markScales(name, q)
		weight := w.block(name+".weight", []int{n, full[0], q.PackedDims(full[1])}, axis, size, r, 1, true)
		scales := w.block(name+".scales", []int{n, full[0], full[1] / q.GroupSize}, axis, size, r, 1, false)
		var biases *mlx.Array
		if q.affine() {
			biases = w.block(name+".biases", []int{n, full[0], full[1] / q.GroupSize}, axis, size, r, 1, false)
		}
		if weight != nil && scales != nil && (biases != nil || !q.affine()) {
			e.Q = &mlx.Quantized{Weight: weight, Scales: scales, Biases: biases, GroupSize: q.GroupSize, Bits: q.Bits, Mode: q.Mode}
		}
	default:
		e.Weight = w.block(name+".weight", []int{n, full[0], full[1]}, axis, size, r, 1, false)
	}
	if bias {
		if role == AllToSharded {
			e.Bias = w.block(name+".bias", []int{n, full[0]}, 1, size, r, 1, false)
		} else {
			e.Bias = w.param(name+".bias", []int{n, out}, false)
		}
	}
	if role == ShardedToAll {
		e.Sum = grp
		if r != 0 {
			e.Bias = nil // added once, before the sum over the group
		}
	}
	return e
}
