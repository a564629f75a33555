package nn

import (
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// Latent attention (DeepSeek-V3's multi-head latent attention): a layer
// compresses each token's keys and values into one latent vector of Rank
// values (normed) and one rotated key of Rope values shared by every head;
// the cache keeps those two alone, as the keys and values of a single
// head of unequal widths. Each head's query is a part of Nope values,
// compared with the latent through the head's key up-projection, and a
// part of Rope values, compared with the shared rotated key; each head's
// output is the latent through its value up-projection.
//
// One token at a time (decode) the key up-projection is applied to the
// query instead (absorbed): the head attends over the latent itself and
// its output is projected up after. Several tokens (a prompt, a
// verification) expand the latent into per-head keys and values first,
// except with a GGUF file's block-quantized up-projections, which run
// absorbed at every length (as llama.cpp runs them).
// Either way the rotated part's scores join as an additive mask.

// LatentHeads are a latent-attention layer's shape: Heads query heads, a
// latent of Rank values, query and key parts of Nope (compared through the
// latent) and Rope (rotated) values, Value values a head's output, and the
// softmax's scale.
type LatentHeads struct {
	Heads, Rank, Nope, Rope, Value int
	Scale                          float32
}

// QueryWidth is the queries' width: every head's Nope and Rope parts.
func (h LatentHeads) QueryWidth() int { return h.Heads * (h.Nope + h.Rope) }

// OutputWidth is the heads' outputs side by side.
func (h LatentHeads) OutputWidth() int { return h.Heads * h.Value }

// LatentQueries are a latent-attention layer's queries of x [B, L, hidden]:
// [B, L, heads * (nope + rope)], through one projection (proj), or,
// where the checkpoint compresses the queries too (proj nil), through a,
// an RMSNorm and b.
func LatentQueries(g *mlx.Graph, x *mlx.Array, proj, a *Linear, norm *RMSNorm, b *Linear) *mlx.Array {
	if proj != nil {
		return proj.Apply(g, x)
	}
	return b.Apply(g, norm.Apply(g, a.Apply(g, x)))
}

// MultiLinear is one matrix per head, stacked [heads, out, in], dense or
// quantized along in (exactly one of Weight and Q is set): mlx-lm's
// MultiLinear and its quantized form, or a GGUF file's blocks. Heads, for
// an affine or block-quantized Q, are its heads' 2-D quantized matrices
// (views of Q, made at load).
type MultiLinear struct {
	Weight *mlx.Array
	Q      *mlx.Quantized
	Heads  []mlx.Quantized
}

// Apply multiplies x [..., heads or 1, n, in] by each head's matrix: x W^T
// ([..., heads, n, out]) when transpose, x W otherwise (x's last axis then
// of out entries, the result's of in). A quantized x W^T runs one head at
// a time on archgen's 2-D product kernels (libmlx's batched quantized
// product over the heads runs element by element on the CPU); the heads'
// products are stacked back on the heads axis. A block-quantized matrix
// (a GGUF file's) multiplies as x W^T only.
func (m *MultiLinear) Apply(g *mlx.Graph, x *mlx.Array, transpose bool) *mlx.Array {
	if m.Heads != nil && transpose && x.Ndim() >= 3 {
		axis := x.Ndim() - 3 // x's heads axis (of heads or 1 entries)
		xs := x.Shape()
		ys := make([]*mlx.Array, len(m.Heads))
		for h, q := range m.Heads {
			start, stop := make([]int, len(xs)), append([]int{}, xs...)
			if xs[axis] != 1 {
				start[axis], stop[axis] = h, h+1
			}
			ys[h] = g.QuantizedMatmul(g.Squeeze(g.Slice(x, start, stop), axis), q, true)
		}
		return g.Stack(axis, ys...)
	}
	if m.Q != nil {
		return g.QuantizedMatmul(x, *m.Q, transpose)
	}
	if transpose {
		return g.Matmul(x, g.Swapaxes(m.Weight, -1, -2))
	}
	return g.Matmul(x, m.Weight)
}

// blockQuantized tells whether the matrices are in a GGUF block format.
func (m *MultiLinear) blockQuantized() bool {
	if m.Q == nil {
		return false
	}
	_, block := mlx.BlockFormatOfMode(m.Q.Mode)
	return block
}

// MultiLinear is the per-head matrices name: weight [heads, out, in],
// dense or quantized along in.
func (w *Weights) MultiLinear(name string, heads, out, in int) *MultiLinear {
	e := w.Experts(name, heads, out, in, false)
	m := &MultiLinear{Weight: e.Weight, Q: e.Q}
	if e.Q == nil {
		return m
	}
	if _, block := mlx.BlockFormatOfMode(e.Q.Mode); e.Q.Mode != "affine" && !block {
		return m
	}
	g := w.l.g
	head := func(a *mlx.Array, h int) *mlx.Array {
		if a == nil {
			return nil // a block format's scales and biases, inside its blocks
		}
		s := a.Shape()
		start, stop := make([]int, len(s)), append([]int{}, s...)
		start[0], stop[0] = h, h+1
		v := g.Squeeze(g.Slice(a, start, stop), 0)
		g.Keep(v)
		w.l.params.views = append(w.l.params.views, v)
		return v
	}
	m.Heads = make([]mlx.Quantized, heads)
	for h := range m.Heads {
		q := *e.Q
		q.Weight, q.Scales, q.Biases = head(e.Q.Weight, h), head(e.Q.Scales, h), head(e.Q.Biases, h)
		m.Heads[h] = q
	}
	return m
}

// LatentAttend is a latent-attention layer's attention, from its queries q
// [B, L, heads * (nope + rope)] and its compression kv [B, L, rank +
// rope] of the same tokens: the latent part normed by norm, the rotated
// parts of both by rope from the cache's offset, the cache extended by the
// latent [B, 1, L, rank] (its keys) and the rotated key [B, 1, L, rope]
// (its values). embed is each head's key up-projection [heads, rank,
// nope], unembed its value up-projection [heads, value, rank]. mask is the
// attention layers' (an array or none). The heads' outputs come back side
// by side: [B, L, heads * value].
func LatentAttend(g *mlx.Graph, h LatentHeads, q, kvIn *mlx.Array, norm *RMSNorm, embed, unembed *MultiLinear, rope Rope, mask mlx.AttentionMask, c kv.Cache) *mlx.Array {
	B, L := q.Dim(0), q.Dim(1)
	q = g.Transpose(g.Reshape(q, B, L, h.Heads, h.Nope+h.Rope), 0, 2, 1, 3)
	qp := g.SplitAt(q, []int{h.Nope}, -1) // [B, heads, L, nope], [B, heads, L, rope]
	kp := g.SplitAt(kvIn, []int{h.Rank}, -1)
	kRot := g.Transpose(g.Reshape(kp[1], B, L, 1, h.Rope), 0, 2, 1, 3) // [B, 1, L, rope]
	latent := g.ExpandDims(norm.Apply(g, kp[0]), 1)                    // [B, 1, L, rank]
	qRot, kRot := RotateQK(g, rope, qp[1], kRot, c.Offset())
	st := c.Update(g, latent, kRot)
	keys, rot := st.Keys, st.Values
	if st.QKeys != nil {
		// a quantized cache: the latent and the rotated keys read back
		// in the queries' dtype
		keys, rot = g.Dequantize(*st.QKeys, q.Dtype()), g.Dequantize(*st.QValues, q.Dtype())
	}
	// the rotated parts' scores [B, heads, L, S], masked, join the
	// softmax as an additive mask
	pe := g.Matmul(g.MultiplyScalar(qRot, float64(h.Scale)), g.Swapaxes(rot, -1, -2))
	pe = kv.MaskScores(g, pe, mask)
	var o *mlx.Array
	if L == 1 || embed.blockQuantized() {
		// (a GGUF file's block formats multiply only as x W^T: a prompt
		// too attends over the latent, as llama.cpp runs it, rather than
		// expanding it through a dequantized copy of the weight)
		qLat := embed.Apply(g, qp[0], true) // [B, heads, 1, rank]
		o = g.SDPA(qLat, keys, keys, h.Scale, mlx.MaskArray(pe))
		o = unembed.Apply(g, o, true) // [B, heads, 1, value]
	} else {
		k := embed.Apply(g, keys, false)  // [B, heads, S, nope]
		v := unembed.Apply(g, keys, true) // [B, heads, S, value]
		o = g.SDPA(qp[0], k, v, h.Scale, mlx.MaskArray(pe))
	}
	return g.Reshape(g.Transpose(o, 0, 2, 1, 3), B, L, h.OutputWidth())
}

// ExpandedLatentAttend is latent attention in its expanded form (mlx-lm's
// DeepSeek-V2 and MiniCPM3): from the queries q [B, L, heads * (nope +
// rope)] and the compression kv [B, L, rank + rope], the latent (normed by
// norm) passes kvB, the up-projections as one linear layer ([heads * (nope
// + value), rank]), into each head's nope key part and its values; the
// rotated key, shared by every head, joins each head's keys; the cache
// keeps every head's keys [B, heads, S, nope + rope] and values [B, heads,
// S, value], and attention is the plain kind over them. mask is the
// attention layers'. The heads' outputs come back side by side: [B, L,
// heads * value].
func ExpandedLatentAttend(g *mlx.Graph, h LatentHeads, q, kvIn *mlx.Array, norm *RMSNorm, kvB *Linear, rope Rope, mask mlx.AttentionMask, c kv.Cache) *mlx.Array {
	B, L := q.Dim(0), q.Dim(1)
	q = g.Transpose(g.Reshape(q, B, L, h.Heads, h.Nope+h.Rope), 0, 2, 1, 3)
	qp := g.SplitAt(q, []int{h.Nope}, -1) // [B, heads, L, nope], [B, heads, L, rope]
	kp := g.SplitAt(kvIn, []int{h.Rank}, -1)
	kRot := g.Transpose(g.Reshape(kp[1], B, L, 1, h.Rope), 0, 2, 1, 3) // [B, 1, L, rope]
	up := kvB.Apply(g, norm.Apply(g, kp[0]))                           // [B, L, heads * (nope + value)]
	up = g.Transpose(g.Reshape(up, B, L, h.Heads, h.Nope+h.Value), 0, 2, 1, 3)
	kv2 := g.SplitAt(up, []int{h.Nope}, -1) // keys' nope parts, values
	qRot, kRot := RotateQK(g, rope, qp[1], kRot, c.Offset())
	kRot = g.BroadcastTo(kRot, B, h.Heads, L, h.Rope) // every head's
	keys := g.Concatenate(-1, kv2[0], kRot)
	queries := g.Concatenate(-1, qp[0], qRot)
	o := kv.Attend(g, queries, c.Update(g, keys, kv2[1]), kv.Spec{Scale: h.Scale, Mask: mask}) // [B, heads, L, value]
	return g.Reshape(g.Transpose(o, 0, 2, 1, 3), B, L, h.OutputWidth())
}

// SplitLatentKV reads a checkpoint that stores a latent-attention layer's
// up-projections as one linear layer, from [heads * (nope + value), rank]
// (Hugging Face's kv_b_proj: per head, the key's nope rows, then the
// value's), into the per-head matrices the layer reads: embed [heads,
// rank, nope] (the key rows, transposed) and unembed [heads, value, rank],
// as mlx-lm's sanitize does. A quantized from (affine, its bits and group
// size implied by its shapes) is dequantized, split and quantized again
// with the same bits and group size. A checkpoint without from is left as
// it is; one holding both from and embed or unembed, or from of the wrong
// shape or form, is an error naming the tensor.
func (w *Weights) SplitLatentKV(from, embed, unembed string, heads, nope, value, rank int) {
	l := w.l
	if l.record {
		return
	}
	wname := w.prefix + from + ".weight"
	wt, ok := l.tensors[wname]
	if !ok {
		return
	}
	for _, to := range []string{embed, unembed} {
		if _, dup := l.tensors[w.prefix+to+".weight"]; dup {
			w.failf("both %s and %s: the checkpoint holds the up-projections twice", w.local(from+".weight"), w.local(to+".weight"))
			return
		}
	}
	parts := map[string]*mlx.Array{}
	for _, s := range []string{".weight", ".scales", ".biases"} {
		if a, ok := l.tensors[w.prefix+from+s]; ok {
			parts[s] = a
			delete(l.tensors, w.prefix+from+s)
			l.scratch = append(l.scratch, a)
		}
	}
	rows := heads * (nope + value)
	g := l.g
	dense := wt
	var bits, group int
	scales, quantized := parts[".scales"]
	if quantized {
		biases := parts[".biases"]
		ws, ss := wt.Shape(), scales.Shape()
		switch {
		case wt.Dtype() != mlx.Uint32 || len(ws) != 2 || ws[0] != rows || len(ss) != 2 || ss[0] != rows || ss[1] == 0:
			w.failf("%s: %s %v with scales %v, want uint32 [%d, packed] with scales [%d, groups] (%d heads of %d + %d rows over a latent of %d)",
				w.local(from+".weight"), wt.Dtype(), ws, ss, rows, rows, heads, nope, value, rank)
			return
		case biases == nil:
			w.failf("missing %s: a quantized %s is split as affine-quantized (scales and biases)", w.local(from+".biases"), w.local(from))
			return
		case rank%ss[1] != 0 || (ws[1]*32)%rank != 0:
			w.failf("%s: weight %v and scales %v do not fit rows of %d", w.local(from), ws, ss, rank)
			return
		}
		bits, group = ws[1]*32/rank, rank/ss[1]
		p := QuantParams{GroupSize: group, Bits: bits, Mode: "affine"}
		if err := p.check(); err != nil {
			w.failf("%s: %v", w.local(from), err)
			return
		}
		if nope%group != 0 {
			w.failf("%s: quantized in groups of %d, which do not divide the key part's %d columns its split quantizes", w.local(from), group, nope)
			return
		}
		dense = g.Dequantize(mlx.Quantized{Weight: wt, Scales: scales, Biases: biases, GroupSize: group, Bits: bits, Mode: "affine"}, mlx.Dtype(255))
	} else if s := wt.Shape(); !wt.Dtype().IsFloat() || len(s) != 2 || s[0] != rows || s[1] != rank {
		w.failf("%s: %s %v, want a float [%d, %d] (%d heads of %d + %d rows over a latent of %d)",
			w.local(from+".weight"), wt.Dtype(), s, rows, rank, heads, nope, value, rank)
		return
	}
	split := g.SplitAt(g.Reshape(dense, heads, nope+value, rank), []int{nope}, 1)
	out := map[string]*mlx.Array{
		embed:   g.Contiguous(g.Swapaxes(split[0], -1, -2)),
		unembed: g.Contiguous(split[1]),
	}
	for _, to := range []string{embed, unembed} {
		if !quantized {
			w.store(to+".weight", out[to])
			continue
		}
		q := g.Quantize(out[to], group, bits)
		w.store(to+".weight", q.Weight)
		w.store(to+".scales", q.Scales)
		w.store(to+".biases", q.Biases)
	}
	if err := g.Err(); err != nil {
		w.failf("%s: splitting into %s and %s: %v", w.local(from), w.local(embed), w.local(unembed), err)
	}
}

// store makes a the checkpoint's tensor prefix+name, a rewrite's output.
func (w *Weights) store(name string, a *mlx.Array) {
	w.l.g.Keep(a)
	w.l.tensors[w.prefix+name] = a
}
