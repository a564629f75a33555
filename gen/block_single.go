package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// The single block: a layer is one residual branch, h = x + sub(norm(x)),
// whose sublayer is a token mixer (attention or a mixer kind) or, on the
// layers structure.feed_forward names, the feed-forward block (Nemotron-H,
// Mamba2). A feed-forward layer keeps no cache: the model's caches are
// those of its mixing layers, in layer order, as mlx-lm makes them.

const singleBlock BlockKind = "single"

func (b *Block) singleDoc() string {
	return fmt.Sprintf("a single-sublayer decoder layer: a token mixer, or the feed-forward block where loading chose it, reads %s(x), and its output is added back", b.Slots[0].Name)
}

// emitSingle writes Layer.forward of a single block:
//
//	func (l *Layer) forward(g, x, mask, c) *mlx.Array {
//		r := l.mix(g, l.Norm.Apply(g, x), mask, c)
//		return g.Add(x, r)
//	}
func (b *Block) emitSingle(f *jen.File) {
	body := []jen.Code{
		jen.Id("r").Op(":=").Add(b.attn.forward(apply(b.Slots[0].Field.of(rLayer), jen.Id("x")))),
	}
	if s := b.scales.Get(ResidualScale); s != nil {
		body = append(body, jen.Id("r").Op("=").Add(call("MultiplyScalar", jen.Id("r"), s.of(rLayer))).Comment(inline(s.Value.Text)))
	}
	body = append(body, jen.Return(call("Add", jen.Id("x"), jen.Id("r"))))
	f.Comment(comment(fmt.Sprintf("forward is %s.", b.doc())))
	f.Func().Params(jen.Id(rLayer).Op("*").Id("Layer")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// resolveSingle checks structure.feed_forward against the block kind and
// compiles it: a per-layer bool, on a single block only, which needs token
// mixers besides attention to choose among.
func (b *builder) resolveSingle(sc *scope) error {
	s, a := &b.d.Structure, b.a
	ff := s.FeedForward
	if s.Block.V != singleBlock {
		if ff.IsSet() {
			return errAt(ff.Pos, "structure.feed_forward", "only a single block (block: single) has layers whose one sublayer is the feed-forward block")
		}
		return nil
	}
	if a.Mixers == nil {
		return errAt(s.Block.Pos, "structure.block", "a single block's layers each hold one token mixer or the feed-forward block: it needs structure.mixers")
	}
	if s.ClipResidual.V {
		return errAt(s.ClipResidual.Pos, "structure.clip_residual", "a single block's residual sums are plain")
	}
	l := b.leaves(sc)
	if ff.IsSet() {
		a.Mixers.feedForward = l.perLayer(ff, "structure.feed_forward")
	}
	if l.err != nil {
		return l.err
	}
	a.Mixers.mlp = a.MLP
	a.MLP.single = true
	a.MLP.Absent = a.Mixers.feedForward == nil
	if a.MLP.Absent && a.MLP.Sparse != nil {
		return errAt(s.MoE.Experts.Pos, "structure.moe", "a single block without feed_forward layers runs no MLP, sparse or dense")
	}
	return nil
}

// sublayerFieldNames: a checkpoint may name every kind of a layer's
// sublayer alike (Nemotron-H's and PLaMo 2's mixer, whichever kind it
// is). Where two of the layer's sublayers share a name, their Go fields
// take their types' names instead (Attention, StateSpace, MLP).
func (a *Arch) sublayerFieldNames() {
	if a.Mixers == nil {
		return
	}
	type sub struct {
		f   *field
		typ string
	}
	var subs []sub
	for _, s := range []sub{{a.Attn.Field, string(tAttention)}, {a.MLP.Field, string(tMLP)}} {
		if s.f != nil {
			subs = append(subs, s)
		}
	}
	for _, x := range a.Mixers.Kinds {
		subs = append(subs, sub{x.field(), string(x.typeName())})
	}
	n := map[string]int{}
	for _, s := range subs {
		n[s.f.name]++
	}
	for _, s := range subs {
		if n[s.f.name] > 1 {
			s.f.name = s.typ
		}
	}
}
