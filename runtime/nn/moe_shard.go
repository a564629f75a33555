package nn

import "github.com/archgen/archgen/runtime/mlx"

// shardedExperts is Experts for stacked experts the plan splits, as
// mlx-lm's shard_inplace splits them: each process holds every expert's
// block of rows (AllToSharded: gate and up, [n, out, in] of the
// checkpoint's [n, out*N, in]) or of columns (ShardedToAll: down, [n, out,
// in] of [n, out, in*N]), whose partial products MoE.Apply sums over the
// group once the experts' outputs are weighed.
func (w *Weights) shardedExperts(name string, n, out, in int, bias bool, role ShardRole) *Experts {
	grp := w.l.opts.Group
	e := &Experts{}
	e.Weight, e.Q = w.shardedMatrix(name, []int{n}, out, in, role)
	if role == ShardedToAll {
		e.Sum = grp
		if bias {
			// each process would add it, and the group's sum hold it N times
			w.failf("%s: %v", w.local(name+".bias"), &ShardError{Size: grp.Size(),
				Msg: "the experts' bias of a layer whose input columns are split cannot be added once"})
		}
		return e
	}
	if bias {
		e.Bias = w.block(name+".bias", []int{n, out * grp.Size()}, 1, grp.Size(), grp.Rank(), w.l.opts.Shard.Parts[name], false)
	}
	return e
}

// sumExperts is the weighed experts' output y summed over the group when
// the experts' last projection is split by its input columns.
func (s *SwitchGLU) sumExperts(g *mlx.Graph, y *mlx.Array) *mlx.Array {
	if s.Down == nil || s.Down.Sum == nil {
		return y
	}
	return g.AllSum(y, s.Down.Sum)
}
