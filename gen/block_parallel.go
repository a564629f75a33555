package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// The parallel block: one norm before the layer feeds both attention and
// the MLP, and their outputs, summed, are added to the residual stream.
// With weights.names.mlp_in_norm set, the MLP reads a norm of its own of
// the same input (GPT-NeoX's two norms).

const parallelBlock BlockKind = "parallel"

func (b *Block) parallelDoc() string {
	if m := b.slot(MLPIn); m != nil {
		return fmt.Sprintf("a parallel decoder layer: attention reads %s(x), the MLP %s(x), and their sum is added back", b.Slots[0].Name, m.Name)
	}
	return fmt.Sprintf("a parallel decoder layer: attention and the MLP both read %s(x), and their sum is added back", b.Slots[0].Name)
}

// emitParallel writes Layer.forward of a parallel block:
//
//	func (l *Layer) forward(g, x, mask, c) *mlx.Array {
//		h := l.InputLayernorm.Apply(g, x)
//		r := g.Add(l.SelfAttn.forward(g, h, mask, c), l.MLP.forward(g, h))
//		return g.Add(x, r)
//	}
func (b *Block) emitParallel(f *jen.File) {
	body := []jen.Code{
		jen.Id("h").Op(":=").Add(apply(b.Slots[0].Field.of(rLayer), jen.Id("x"))),
	}
	hm := jen.Id("h")
	if m := b.slot(MLPIn); m != nil {
		body = append(body, jen.Id("hm").Op(":=").Add(apply(m.Field.of(rLayer), jen.Id("x"))))
		hm = jen.Id("hm")
	}
	body = append(body, jen.Id("r").Op(":=").Add(call("Add", b.attn.forward(jen.Id("h")), b.mlp.forward(hm))))
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
