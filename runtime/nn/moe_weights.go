package nn

import (
	"fmt"
	"slices"

	"github.com/archgen/archgen/runtime/mlx"
)

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

// StackExperts stacks a checkpoint's per-expert tensors into the layout
// Experts reads, as mlx-lm's sanitize does for Hugging Face checkpoints:
// for each suffix (weight, and a pre-quantized matrix's scales and
// biases, and a bias), the n tensors from(e)+suffix become
// to+suffix [n, ...]. A checkpoint already stacked, or with no expert 0,
// is left as it is. A missing expert, or one whose shape or dtype differs
// from expert 0's, is an error naming it.
func (w *Weights) StackExperts(to string, from func(e int) string, n int) {
	l := w.l
	if l.record {
		return
	}
	for _, suffix := range []string{".weight", ".scales", ".biases", ".bias"} {
		first := w.prefix + from(0) + suffix
		a0, ok := l.tensors[first]
		if !ok {
			continue
		}
		parts := make([]*mlx.Array, 0, n)
		bad := false
		for e := 0; e < n; e++ {
			name := w.prefix + from(e) + suffix
			a, ok := l.tensors[name]
			if !ok {
				w.failf("missing %s (expert %d of %d)", w.local(from(e)+suffix), e, n)
				bad = true
				continue
			}
			delete(l.tensors, name)
			l.scratch = append(l.scratch, a)
			if !slices.Equal(a.Shape(), a0.Shape()) || a.Dtype() != a0.Dtype() {
				w.failf("%s: %s %v, but expert 0's is %s %v: experts must have one shape", w.local(from(e)+suffix), a.Dtype(), a.Shape(), a0.Dtype(), a0.Shape())
				bad = true
				continue
			}
			parts = append(parts, a)
		}
		for e := n; ; e++ {
			name := w.prefix + from(e) + suffix
			a, ok := l.tensors[name]
			if !ok {
				break
			}
			w.failf("unexpected %s: the config has %d experts", w.local(from(e)+suffix), n)
			delete(l.tensors, name)
			l.scratch = append(l.scratch, a)
		}
		if bad {
			continue
		}
		stacked := l.g.Stack(0, parts...)
		if err := l.g.Err(); err != nil {
			w.failf("%s: stacking experts: %v", w.local(to+suffix), err)
			continue
		}
		l.g.Keep(stacked)
		if _, dup := l.tensors[w.prefix+to+suffix]; dup {
			w.failf("%s: both stacked and per-expert tensors", w.local(to+suffix))
			stacked.Free()
			continue
		}
		l.tensors[w.prefix+to+suffix] = stacked
	}
}

// ExpertName is the per-expert naming of a Hugging Face checkpoint:
// prefix.e.proj.
func ExpertName(prefix, proj string) func(e int) string {
	return func(e int) string { return fmt.Sprintf("%s.%d.%s", prefix, e, proj) }
}

// Matrix is a linear without bias whose weight [out, in] is a plain
// parameter, never quantized (a router mlx-lm keeps as a bare weight).
func (w *Weights) Matrix(name string, out, in int) *Linear {
	if w.l.record {
		w.spec(name+".weight", []int{out, in}, nil, false)
		return &Linear{}
	}
	return &Linear{Weight: w.param(name+".weight", []int{out, in}, false)}
}

// Vector is the parameter name [n]. When the model is loaded over a
// group and the shard plan splits name (AllToSharded: a value per head,
// such as attention sinks), n is this process's share and it reads its
// block of the whole.
func (w *Weights) Vector(name string, n int) *mlx.Array {
	if w.l.record {
		w.spec(name, []int{n}, nil, false)
		return nil
	}
	if w.role(name) == AllToSharded {
		grp := w.l.opts.Group
		return w.block(name, []int{n * grp.Size()}, 0, grp.Size(), grp.Rank(), 1, false)
	}
	return w.param(name, []int{n}, false)
}

// UnfuseExperts reads a checkpoint whose experts are stacked under other
// names: from.weight [E, parts*out, in] becomes to[i].weight [E, out, in],
// split in equal parts along its rows (a fused gate and up), or renamed
// when to has one entry. A checkpoint without from.weight is left as it is.
func (w *Weights) UnfuseExperts(from string, to ...string) {
	l := w.l
	if l.record {
		return
	}
	name := w.prefix + from + ".weight"
	a, ok := l.tensors[name]
	if !ok {
		return
	}
	delete(l.tensors, name)
	l.scratch = append(l.scratch, a)
	if a.Ndim() != 3 || a.Dim(1)%len(to) != 0 {
		w.failf("%s: shape %v, want [experts, %d * rows, columns]", w.local(from+".weight"), a.Shape(), len(to))
		return
	}
	parts := []*mlx.Array{a}
	if len(to) > 1 {
		parts = l.g.Split(a, len(to), 1)
	}
	for i, t := range to {
		if _, dup := l.tensors[w.prefix+t+".weight"]; dup {
			w.failf("%s: both %s and %s", w.local(t+".weight"), w.local(from+".weight"), w.local(t+".weight"))
			continue
		}
		p := parts[i]
		if len(to) > 1 {
			p = l.g.Contiguous(p)
		}
		l.g.Keep(p)
		l.tensors[w.prefix+t+".weight"] = p
	}
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
