package gen

import (
	"github.com/dave/jennifer/jen"
)

// emitForward writes forward.go: Forward, Hidden, then each module's
// forward, top to bottom. Straight-line: every choice was made when
// generating, and what varies per layer is read from the tables build made.
//
//	func (m *Model) Forward(g, tokens, caches) *mlx.Array   // Hidden, then the head
//	func (m *Model) Hidden(g, tokens, caches) *mlx.Array    // embed, masks, layers, final norm
//	func (l *Layer) forward(g, x, mask, c) *mlx.Array       // the block's residual wiring
//	func (a *Attention) forward(g, x, mask, c) *mlx.Array   // q, k, v, rope, cache, attend, o
//	func (p *MLP) forward(g, x) *mlx.Array
func emitForward(a *Arch) ([]byte, error) {
	f := newFile(a.Pkg(), a.File)
	emitForwardFunc(f, a)
	a.Block.emitForward(f)
	a.Attn.emitForward(f)
	for _, x := range a.Mixers.types() {
		x.emitForward(f)
	}
	a.MLP.emitForward(f)
	return render(f)
}

func emitForwardFunc(f *jen.File, a *Arch) {
	stack := a.Block.Stack.of(rModel)
	check := jen.Id("caches").Op("=").Qual(nnPkg, "CheckCaches").Call(g(), jen.Id("caches"), jen.Len(stack.Clone()))
	if a.MLP.single || a.Attn.KVFrom != nil {
		// the caches of the layers that keep one, spread over every layer
		// (readers of their owners' on layers that share keys and values)
		check = jen.Id("caches").Op("=").Qual(nnPkg, "LayerCaches").Call(g(), jen.Id("caches"), fCaches.of(rModel))
	}
	body := []jen.Code{
		check,
		jen.Id("L").Op(":=").Qual(nnPkg, "SeqLen").Call(g(), jen.Id("tokens")),
	}
	body = append(body, a.Embed.forward()...)
	maskArray := a.Attn.MaskArray() || a.Mixers.maskArray()
	var mask jen.Code
	if a.Mixers != nil && a.Attn.Sliding == nil {
		body = append(body, a.Mixers.mask(maskArray))
		mask = jen.Id("mask")
	} else if sl := a.Attn.Sliding; sl != nil {
		var lines []jen.Code
		lines, mask = sl.masks(maskArray)
		body = append(body, lines...)
	} else {
		body = append(body, jen.Id("mask").Op(":=").Id("caches").Index(jen.Lit(0)).Dot("Mask").Call(g(), jen.Id("L"), jen.Lit(0), jen.Lit(maskArray)))
		mask = jen.Id("mask")
	}
	body = append(body, a.Embed.positionsForward()...)
	args := []jen.Code{g(), jen.Id("h"), mask, jen.Id("caches").Index(jen.Id("i"))}
	if a.PerLayer != nil {
		body = append(body, a.PerLayer.forward())
		args = append(args, a.PerLayer.arg())
	}
	body = append(body,
		jen.For(jen.Id("i").Op(":=").Range().Add(stack.Clone())).Block(
			jen.Id("h").Op("=").Add(stack.Clone()).Index(jen.Id("i")).Dot("forward").Call(args...),
		),
	)
	if a.Head.hasNorm() {
		body = append(body, a.Head.normForward())
	}
	body = append(body, jen.Return(jen.Id("h")))

	params := []jen.Code{graphParam(), jen.Id("tokens").Add(arrayType()), jen.Id("caches").Index().Qual(kvPkg, "Cache")}
	if a.Encoder != nil {
		emitEncoderForward(f, a, params, body)
		return
	}
	head := []jen.Code{jen.Id("h").Op(":=").Id(rModel).Dot("Hidden").Call(g(), jen.Id("tokens"), jen.Id("caches")).Comment("[B, L, hidden]")}
	head = append(head, a.Head.forward()...)
	head = append(head, jen.Return(jen.Id("logits")))
	f.Comment(comment("Forward runs tokens [B, L] (integers) through the model, attending over and extending caches (one per layer, from NewCaches), and returns the logits [B, L, vocab]. Problems are recorded on g and reported by its Eval."))
	f.Func().Params(jen.Id(rModel).Op("*").Id("Model")).Id("Forward").Params(params...).Add(arrayType()).Block(head...)
	f.Line()
	f.Comment(comment("Hidden is Forward without the head: the hidden states [B, L, hidden] the final norm gives, which the head turns into logits (embeddings pool them). It attends over and extends caches as Forward does."))
	f.Func().Params(jen.Id(rModel).Op("*").Id("Model")).Id("Hidden").Params(params...).Add(arrayType()).Block(body...)
	f.Line()
}

// emitEncoderForward writes an encoder's Forward (which fails: it has no
// token head), Hidden and, with a classifier, Score and Labels.
func emitEncoderForward(f *jen.File, a *Arch, params, body []jen.Code) {
	f.Comment(comment("Forward fails g: an encoder has no head that predicts tokens, so it does not generate. Hidden gives its states; archgen's Embed pools them" + map[bool]string{true: " and Rerank scores them (Score).", false: "."}[a.Encoder.cls != nil]))
	f.Func().Params(jen.Id(rModel).Op("*").Id("Model")).Id("Forward").Params(params...).Add(arrayType()).Block(
		g().Dot("Failf").Call(jen.Lit("%s is an encoder: it embeds and scores its input, it does not predict tokens"), jen.Id("Name")),
		jen.Return(jen.Id("tokens")),
	)
	f.Line()
	f.Comment(comment("Hidden reads tokens [B, L] (integers) whole, every position attending to every other, and returns the hidden states [B, L, hidden]. caches are the encoder's (kv.Encoding, from NewCaches or made for a padded batch): they keep nothing, and carry each row's length and its tokens' types. Problems are recorded on g and reported by its Eval."))
	f.Func().Params(jen.Id(rModel).Op("*").Id("Model")).Id("Hidden").Params(params...).Add(arrayType()).Block(body...)
	f.Line()
	a.Encoder.emitScore(f)
}
