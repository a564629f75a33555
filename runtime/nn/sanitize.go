package nn

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// Rewrites of a checkpoint's layout into the one the loaders read, as
// mlx-lm's sanitize steps do: tensors moved between modules, experts
// stacked, unfused or un-interleaved.

// MoveTensor renames the checkpoint's tensor from to to, when the
// checkpoint holds from: a parameter some checkpoints keep in another
// module than the one that reads it (a router's correction bias beside
// the router). A checkpoint holding both is an error naming them.
func (w *Weights) MoveTensor(from, to string) {
	l := w.l
	if l.record {
		return
	}
	a, ok := l.tensors[w.prefix+from]
	if !ok {
		return
	}
	if _, dup := l.tensors[w.prefix+to]; dup {
		w.failf("both %s and %s: the checkpoint holds one tensor twice", w.local(from), w.local(to))
		return
	}
	delete(l.tensors, w.prefix+from)
	l.tensors[w.prefix+to] = a
}

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

// UnfuseExperts reads a checkpoint whose experts are stacked under other
// names: from.weight [E, parts*out, in] becomes to[i].weight [E, out, in],
// split in equal parts along its rows (a fused gate and up), or renamed
// when to has one entry; from alone, without the .weight suffix, is read
// the same way (Qwen3.5-MoE's Hugging Face files). A checkpoint without
// either is left as it is.
func (w *Weights) UnfuseExperts(from string, to ...string) {
	if w.l.record {
		return
	}
	name := w.prefix + from + ".weight"
	if _, ok := w.l.tensors[name]; !ok {
		name = w.prefix + from
	}
	w.unfuse(name, from, to, 1, "[experts, %d * rows, columns]")
}

// UnfuseExpertsTransposed reads a checkpoint whose experts are stacked
// with each matrix's axes swapped (transformers' Qwen3-VL-MoE files): from
// [E, in, parts*out] becomes to[i].weight [E, out, in], split in equal
// parts along its last axis (a fused gate and up, gate first) and each
// part's last two axes swapped, or only swapped when to has one entry;
// from.weight is read where from alone is absent. A checkpoint without
// either is left as it is.
func (w *Weights) UnfuseExpertsTransposed(from string, to ...string) {
	if w.l.record {
		return
	}
	name := w.prefix + from
	if _, ok := w.l.tensors[name]; !ok {
		name = w.prefix + from + ".weight"
	}
	w.unfuse(name, from, to, 2, "[experts, columns, %d * rows]")
}

// unfuse splits the tensor name (from.weight, or from) into len(to) equal
// parts along axis, to[i].weight each, the tensor of axis+2 axes that want
// (a format of len(to)) describes; a no-op when there is no such tensor.
// Split along the last of three axes (experts stored [E, in, out]), each
// part has its last two axes swapped back to [E, out, in].
func (w *Weights) unfuse(name, from string, to []string, axis int, want string) {
	l := w.l
	a, ok := l.tensors[name]
	if !ok {
		return
	}
	delete(l.tensors, name)
	l.scratch = append(l.scratch, a)
	swap := axis == 2
	if (a.Ndim() != axis+2 && !swap) || (swap && a.Ndim() != 3) || a.Dim(axis)%len(to) != 0 {
		w.failf("%s: shape %v, want "+want, w.local(strings.TrimPrefix(name, w.prefix)), a.Shape(), len(to))
		return
	}
	parts := []*mlx.Array{a}
	if len(to) > 1 {
		parts = l.g.Split(a, len(to), axis)
	}
	for i, t := range to {
		if _, dup := l.tensors[w.prefix+t+".weight"]; dup {
			w.failf("%s: both %s and %s", w.local(t+".weight"), w.local(strings.TrimPrefix(name, w.prefix)), w.local(t+".weight"))
			continue
		}
		p := parts[i]
		switch {
		case swap:
			p = l.g.Contiguous(l.g.Transpose(p, 0, 2, 1))
		case len(to) > 1:
			p = l.g.Contiguous(p)
		}
		l.g.Keep(p)
		l.tensors[w.prefix+t+".weight"] = p
	}
}

// Rename replaces from with to in the name of every tensor that holds it,
// as mlx-lm's sanitize rewrites names of another vocabulary; two tensors
// that come to one name fail the load naming both.
func (w *Weights) Rename(from, to string) {
	l := w.l
	if l.record {
		return
	}
	moved := map[string]*mlx.Array{}
	for name, a := range l.tensors {
		if !strings.Contains(name, from) {
			continue
		}
		renamed := strings.ReplaceAll(name, from, to)
		delete(l.tensors, name)
		_, dup := l.tensors[renamed]
		if _, twice := moved[renamed]; dup || twice {
			w.failf("%s and %s: the checkpoint holds one tensor under both names", name, renamed)
			continue
		}
		moved[renamed] = a
	}
	for name, a := range moved {
		l.tensors[name] = a
	}
}

// PrefixBare reads a checkpoint whose tensor names all lack prefix
// (Hugging Face's GPT-2 files) under it, and transposes the two-dimensional
// tensors whose names end with one of transpose (Conv1D weights, stored
// [in, out], to a linear layer's [out, in]), as mlx-lm's sanitize does; a
// checkpoint with any name under prefix is left as it is.
func (w *Weights) PrefixBare(prefix string, transpose []string) {
	l := w.l
	if l.record {
		return
	}
	for name := range l.tensors {
		if strings.HasPrefix(name, prefix+".") {
			return
		}
	}
	moved := make(map[string]*mlx.Array, len(l.tensors))
	for name, a := range l.tensors {
		if a.Ndim() == 2 && slices.ContainsFunc(transpose, func(s string) bool { return strings.HasSuffix(name, s) }) {
			t := l.g.Contiguous(l.g.Transpose(a, 1, 0))
			if err := l.g.Err(); err != nil {
				w.failf("%s: transposing: %v", name, err)
				return
			}
			l.g.Keep(t)
			l.scratch = append(l.scratch, a)
			a = t
		}
		moved[prefix+"."+name] = a
	}
	l.tensors = moved
}

// UnfuseRows splits a projection stored fused, from.weight [n * rows,
// columns] (unquantized), into n equal parts by rows, to[i].weight each, as
// mlx-lm's sanitize splits a module it stores in another form; a no-op
// when the checkpoint has no from.
func (w *Weights) UnfuseRows(from string, to ...string) {
	if w.l.record {
		return
	}
	w.unfuse(w.prefix+from+".weight", from, to, 0, "[%d * rows, columns]")
}

// ShiftNorms adds add to every one-dimensional tensor whose name ends with
// one of norms, in the tensor's own dtype, as mlx-lm's sanitize does for
// checkpoints that store those norms centred on zero; but only when the
// checkpoint is in that form: some tensor's name ends with whenSuffix (and,
// when lastDimNot > 0, that tensor's last axis is not lastDimNot long).
func (w *Weights) ShiftNorms(add float64, norms []string, whenSuffix string, lastDimNot int) {
	l := w.l
	if l.record {
		return
	}
	form := false
	for name, a := range l.tensors {
		if strings.HasSuffix(name, whenSuffix) && (lastDimNot <= 0 || a.Ndim() == 0 || a.Dim(a.Ndim()-1) != lastDimNot) {
			form = true
			break
		}
	}
	if !form {
		return
	}
	for name, a := range l.tensors {
		if a.Ndim() != 1 || !slices.ContainsFunc(norms, func(s string) bool { return strings.HasSuffix(name, s) }) {
			continue
		}
		shifted := l.g.AddScalar(a, add)
		if err := l.g.Err(); err != nil {
			w.failf("%s: adding %g: %v", name, add, err)
			return
		}
		l.g.Keep(shifted)
		l.scratch = append(l.scratch, a)
		l.tensors[name] = shifted
	}
}

// Unmoved reports whether the convolution weight name is still in Hugging
// Face's [channels, 1, taps] order (its last axis longer than its second),
// as mlx-lm's sanitize tells a checkpoint whose multipliers it must fold.
func (w *Weights) Unmoved(name string) bool {
	l := w.l
	if l.record {
		return false
	}
	a, ok := l.tensors[w.prefix+name]
	return ok && a.Ndim() == 3 && a.Dim(2) > a.Dim(1)
}

// foldable is every tensor whose name ends with suffix, checked to be
// floating (a multiplier folds into unquantized weights only).
func (w *Weights) foldable(suffix string) []string {
	var names []string
	for name, a := range w.l.tensors {
		if !strings.HasSuffix(name, suffix) || w.l.folded[name] {
			continue // a tensor takes the first rule it matches
		}
		if !a.Dtype().IsFloat() {
			w.failf("%s: dtype %s: a multiplier folds into unquantized weights only (this checkpoint keeps its multipliers apart)", name, a.Dtype())
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// replace puts a (kept) in the place of the tensor name, the old one freed
// with the load's scratch.
func (w *Weights) replace(name string, a *mlx.Array) {
	l := w.l
	if err := l.g.Err(); err != nil {
		w.failf("%s: %v", name, err)
		return
	}
	l.g.Keep(a)
	l.scratch = append(l.scratch, l.tensors[name])
	l.tensors[name] = a
	if l.folded == nil {
		l.folded = map[string]bool{}
	}
	l.folded[name] = true
}

// ScaleTensors multiplies every tensor whose name ends with suffix by by,
// in the tensor's own dtype, as mlx-lm's sanitize folds a multiplier.
func (w *Weights) ScaleTensors(suffix string, by float64) {
	if w.l.record {
		return
	}
	for _, name := range w.foldable(suffix) {
		w.replace(name, w.l.g.MultiplyScalar(w.l.tensors[name], by))
	}
}

// ScaleRows multiplies every tensor whose name ends with suffix, row block
// by row block: the counts[i] rows of block i by factors[i] times by, the
// factors made a vector in the tensor's dtype first, as mlx-lm's sanitize
// folds Falcon-H1's in_proj multipliers. The blocks must cover the rows.
func (w *Weights) ScaleRows(suffix string, by float64, counts []int, factors []float64) {
	l := w.l
	if l.record {
		return
	}
	rows := 0
	for _, c := range counts {
		rows += c
	}
	var v []float32
	for i, c := range counts {
		for range max(c, 0) {
			v = append(v, float32(factors[i]))
		}
	}
	for _, name := range w.foldable(suffix) {
		a := l.tensors[name]
		if a.Ndim() != 2 || a.Dim(0) != rows {
			w.failf("%s: shape %v, want %d rows (the blocks its multipliers fold into)", name, a.Shape(), rows)
			continue
		}
		vec := l.g.MultiplyScalar(l.g.AsType(mlx.FromSlice(l.g, v, rows, 1), a.Dtype()), by)
		w.replace(name, l.g.Multiply(a, vec))
	}
}

// UnitRows scales the tensor name to unit length along axis (-1: each
// row; 0: each column), in float32, w / (‖w‖ + eps), and casts it back to
// its dtype (Baichuan-M1's head by rows, Bailing's by columns, as mlx-lm's
// sanitize does), when it is stored in a floating type and its module
// holds no quantization scales: a quantized checkpoint was saved with the
// rows scaled already. A missing tensor is left to whoever asks for it.
func (w *Weights) UnitRows(name string, eps float64, axis int) {
	l := w.l
	if l.record {
		return
	}
	a, ok := l.tensors[name]
	if !ok || !a.Dtype().IsFloat() {
		return
	}
	if _, quantized := l.tensors[strings.TrimSuffix(name, ".weight")+".scales"]; quantized {
		return
	}
	g := l.g
	f := g.AsType(a, mlx.Float32)
	u := g.AsType(g.Divide(f, g.AddScalar(g.Norm(f, true, axis), eps)), a.Dtype())
	if err := g.Err(); err != nil {
		w.failf("%s: scaling its rows to unit length: %v", name, err)
		return
	}
	g.Keep(u)
	l.scratch = append(l.scratch, a)
	l.tensors[name] = u
}
