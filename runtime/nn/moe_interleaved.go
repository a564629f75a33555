package nn

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// UninterleaveExperts reads stacked experts published with gate and up
// fused and interleaved, and quantized in mxfp4 as blocks of bytes
// (gpt-oss's checkpoints), into the layout Experts reads, as mlx-lm's
// sanitize does:
//
//   - scope.gateUp_blocks [E, 2*H, G, 16] uint8: the packed weights, each
//     row's G groups of 32 4-bit values; read as uint32 words
//     [E, 2*H, G*4], the even rows are scope.gate.weight and the odd
//     ones scope.up.weight;
//   - scope.gateUp_scales [E, 2*H, G] and scope.gateUp_bias [E, 2*H]:
//     split the same way into .scales and .bias;
//   - scope.down_blocks, _scales and _bias: scope.down.weight, .scales
//     and .bias, the blocks read as words.
//
// A checkpoint without scope.gateUp_blocks is left as it is (mlx-lm's
// layout, stacked already). A tensor of the wrong dtype or shape, or one
// beside the stacked tensor it would become, is an error naming it.
func (w *Weights) UninterleaveExperts(scope, gateUp, gate, up, down string) {
	l := w.l
	if l.record {
		return
	}
	if _, ok := l.tensors[w.prefix+scope+"."+gateUp+"_blocks"]; !ok {
		return
	}
	for _, x := range []struct {
		from   string
		to     []string
		blocks bool
	}{
		{gateUp + "_blocks", []string{gate + ".weight", up + ".weight"}, true},
		{gateUp + "_scales", []string{gate + ".scales", up + ".scales"}, false},
		{gateUp + "_bias", []string{gate + ".bias", up + ".bias"}, false},
		{down + "_blocks", []string{down + ".weight"}, true},
		{down + "_scales", []string{down + ".scales"}, false},
		{down + "_bias", []string{down + ".bias"}, false},
	} {
		name := scope + "." + x.from
		a, ok := l.tensors[w.prefix+name]
		if !ok {
			w.failf("missing %s (the experts' fused gate and up are in blocks, so every part must be)", w.local(name))
			continue
		}
		delete(l.tensors, w.prefix+name)
		l.scratch = append(l.scratch, a)
		if x.blocks {
			s := a.Shape()
			if a.Dtype() != mlx.Uint8 || len(s) != 4 || s[3] != 16 {
				w.failf("%s: %s %v, want uint8 [experts, rows, groups, 16] (mxfp4 blocks of 32 values)", w.local(name), a.Dtype(), s)
				continue
			}
			a = l.g.Reshape(l.g.View(a, mlx.Uint32), s[0], s[1], s[2]*4)
		}
		parts := []*mlx.Array{a}
		if len(x.to) == 2 {
			if parts = w.evenOdd(a, name); parts == nil {
				continue
			}
		}
		for i, t := range x.to {
			full := w.prefix + scope + "." + t
			if _, dup := l.tensors[full]; dup {
				w.failf("%s: both %s and %s", w.local(scope+"."+t), w.local(name), w.local(scope+"."+t))
				continue
			}
			p := l.g.Contiguous(parts[i])
			if err := l.g.Err(); err != nil {
				w.failf("%s: %v", w.local(name), err)
				break
			}
			l.g.Keep(p)
			l.tensors[full] = p
		}
	}
}

// evenOdd splits a [E, 2*H, ...] along its rows (axis 1) into the even
// rows and the odd ones; nil, with the problem recorded, when the rows
// are odd in number.
func (w *Weights) evenOdd(a *mlx.Array, name string) []*mlx.Array {
	s := a.Shape()
	if len(s) < 2 || s[1]%2 != 0 {
		w.failf("%s: shape %v, want [experts, 2 * rows, ...] (gate and up rows interleaved)", w.local(name), s)
		return nil
	}
	g := w.l.g
	pairs := append([]int{s[0], s[1] / 2, 2}, s[2:]...)
	r := g.Reshape(a, pairs...)
	out := make([]*mlx.Array, 2)
	for k := range out {
		start := make([]int, len(pairs))
		start[2] = k
		stop := append([]int{}, pairs...)
		stop[2] = k + 1
		out[k] = g.Squeeze(g.Slice(r, start, stop), 2)
	}
	return out
}
