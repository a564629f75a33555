package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// emitForward writes forward.go: Forward, then one method per block, top
// to bottom. Straight-line: every choice was made when generating, and
// what varies per layer is read from the tables build made.
//
//	func (m *Model) Forward(g, tokens, caches) *mlx.Array  // embed, masks, layers, norm, head
//	func (m *Model) layer(g, l, x, mask, c) *mlx.Array     // the block's residual wiring
//	func (m *Model) attention(g, l, x, mask, c) *mlx.Array // q, k, v, rope, cache, attend, o
//	func (m *Model) mlp(g, p, x) *mlx.Array
func emitForward(a *Arch) ([]byte, error) {
	f := newFile(a.Pkg(), a.File)
	emitForwardFunc(f, a)
	emitLayer(f, a)
	emitAttention(f, a)
	emitMLP(f, a)
	return render(f)
}

// g spells the graph, call an op on it.
func g() *jen.Statement { return jen.Id("g") }

func call(op string, args ...jen.Code) *jen.Statement { return g().Dot(op).Call(args...) }

func graphParam() jen.Code { return jen.Id("g").Op("*").Qual(mlxPkg, "Graph") }
func arrayType() jen.Code  { return jen.Op("*").Qual(mlxPkg, "Array") }

func emitForwardFunc(f *jen.File, a *Arch) {
	n := a.Names
	layers := jen.Id("m").Dot(goName(n.Layers))
	body := []jen.Code{
		jen.Id("caches").Op("=").Qual(nnPkg, "CheckCaches").Call(g(), jen.Id("caches"), jen.Len(layers.Clone())),
		jen.Id("L").Op(":=").Qual(nnPkg, "SeqLen").Call(g(), jen.Id("tokens")),
		jen.Id("h").Op(":=").Id("m").Dot(goName(n.Embed)).Dot("Apply").Call(g(), jen.Id("tokens")).Comment("[B, L, hidden]"),
	}
	if a.EmbedScale != nil {
		body = append(body, jen.Id("h").Op("=").Add(call("MultiplyScalar", jen.Id("h"), m("embedScale"))).Comment(a.EmbedScale.Text))
	}
	var mask jen.Code
	if a.Sliding() {
		body = append(body,
			jen.Comment("The masks of the full-attention layers and of the sliding ones, made"),
			jen.Comment("once from the first cache of each kind."),
			jen.Id("masks").Op(":=").Index(jen.Lit(2)).Qual(mlxPkg, "AttentionMask").Values(
				jen.Line().Id("caches").Index(m("fullLayer")).Dot("Mask").Call(g(), jen.Id("L"), jen.Lit(0), jen.Lit(a.MaskArray())),
				jen.Line().Id("caches").Index(m("slidingLayer")).Dot("Mask").Call(g(), jen.Id("L"), m("window"), jen.Lit(a.MaskArray())),
				jen.Line(),
			))
		mask = jen.Id("masks").Index(layers.Clone().Index(jen.Id("i")).Dot("mask"))
	} else {
		body = append(body, jen.Id("mask").Op(":=").Id("caches").Index(jen.Lit(0)).Dot("Mask").Call(g(), jen.Id("L"), jen.Lit(0), jen.Lit(a.MaskArray())))
		mask = jen.Id("mask")
	}
	body = append(body,
		jen.For(jen.Id("i").Op(":=").Range().Add(layers.Clone())).Block(
			jen.Id("h").Op("=").Id("m").Dot("layer").Call(g(), jen.Op("&").Add(layers.Clone()).Index(jen.Id("i")), jen.Id("h"), mask, jen.Id("caches").Index(jen.Id("i"))),
		),
		jen.Id("h").Op("=").Id("m").Dot(goName(n.Norm)).Dot("Apply").Call(g(), jen.Id("h")),
		jen.Id("logits").Op(":=").Id("m").Dot(goName(n.LMHead)).Dot("Apply").Call(g(), jen.Id("h")).Comment("[B, L, vocab]"),
	)
	if a.Head.Divide != nil {
		body = append(body, jen.Id("logits").Op("=").Add(call("DivideScalar", jen.Id("logits"), m("logitsDivisor"))).Comment("/ "+a.Head.Divide.Text))
	}
	if a.Head.Softcap != nil {
		body = append(body, jen.Id("logits").Op("=").Qual(nnPkg, "Softcap").Call(g(), jen.Id("logits"), m("finalSoftcap")).Comment("tanh(logits / c) * c"))
	}
	body = append(body, jen.Return(jen.Id("logits")))
	f.Comment(comment("Forward runs tokens [B, L] (integers) through the model, attending over and extending caches (one per layer, from NewCaches), and returns the logits [B, L, vocab]. Problems are recorded on g and reported by its Eval."))
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("Forward").Params(graphParam(), jen.Id("tokens").Add(arrayType()), jen.Id("caches").Index().Qual(kvPkg, "Cache")).Add(arrayType()).Block(body...)
	f.Line()
}

// blockDoc describes a block kind's wiring.
var blockDoc = map[BlockKind]string{
	"pre_norm":  "a pre-norm decoder layer: each sublayer reads a normed copy of the residual stream and adds its output back",
	"post_norm": "a post-norm decoder layer: each sublayer reads the residual stream as it is, and its output is normed before it is added back",
	"sandwich":  "a sandwich-norm decoder layer: each sublayer reads a normed copy of the residual stream, and its output is normed again before it is added back",
	"four_norm": "a decoder layer with four norms: each sublayer reads a normed copy of the residual stream, and its output is normed again before it is added back",
}

func emitLayer(f *jen.File, a *Arch) {
	n := a.Names
	l := func() *jen.Statement { return jen.Id("l") }
	normed := func(role string, x jen.Code) jen.Code {
		if s := a.normSlot(role); s != nil {
			return l().Dot(s.Field).Dot("Apply").Call(g(), x)
		}
		return x
	}
	branch := func(out string, first bool, sub jen.Code) []jen.Code {
		op := "="
		if first {
			op = ":="
		}
		stmts := []jen.Code{jen.Id("r").Op(op).Add(sub)}
		if s := a.normSlot(out); s != nil {
			stmts = append(stmts, jen.Id("r").Op("=").Add(l().Dot(s.Field).Dot("Apply").Call(g(), jen.Id("r"))))
		}
		if a.ResidualScale != nil {
			stmts = append(stmts, jen.Id("r").Op("=").Add(call("MultiplyScalar", jen.Id("r"), m("residualScale"))).Comment(a.ResidualScale.Text))
		}
		return stmts
	}
	var body []jen.Code
	body = append(body, branch("attn_out", true,
		jen.Id("m").Dot("attention").Call(g(), l(), normed("attn_in", jen.Id("x")), jen.Id("mask"), jen.Id("c")))...)
	body = append(body, jen.Id("h").Op(":=").Add(call("Add", jen.Id("x"), jen.Id("r"))))
	body = append(body, branch("mlp_out", false,
		jen.Id("m").Dot("mlp").Call(g(), jen.Op("&").Add(l()).Dot(goName(n.MLP)), normed("mlp_in", jen.Id("h"))))...)
	body = append(body, jen.Return(call("Add", jen.Id("h"), jen.Id("r"))))
	f.Comment(comment(fmt.Sprintf("layer is %s.", blockDoc[a.Block])))
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("layer").Params(
		graphParam(), jen.Id("l").Op("*").Id("Layer"), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

func emitAttention(f *jen.File, a *Arch) {
	n := a.Names
	at := func() *jen.Statement { return jen.Id("a") }
	apply := func(field string, x jen.Code) *jen.Statement { return at().Dot(field).Dot("Apply").Call(g(), x) }
	hd := func(h string) *jen.Statement { return m(h).Op("*").Add(m("headDim")) }
	body := []jen.Code{
		jen.Id("a").Op(":=").Op("&").Id("l").Dot(goName(n.Attention)),
		jen.List(jen.Id("B"), jen.Id("L")).Op(":=").List(jen.Id("x").Dot("Dim").Call(jen.Lit(0)), jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
	}
	if a.Attn.FusedQKV {
		body = append(body,
			jen.Id("qkv").Op(":=").Add(call("SplitAt", apply(goName(n.QKV), jen.Id("x")),
				jen.Index().Int().Values(hd("heads"), jen.Parens(m("heads").Op("+").Add(m("kvHeads"))).Op("*").Add(m("headDim"))), jen.Lit(-1))),
			jen.List(jen.Id("q"), jen.Id("k"), jen.Id("v")).Op(":=").List(jen.Id("qkv").Index(jen.Lit(0)), jen.Id("qkv").Index(jen.Lit(1)), jen.Id("qkv").Index(jen.Lit(2))).
				Comment("[B, L, heads*head_dim], [B, L, kv_heads*head_dim] twice"),
		)
	} else {
		body = append(body,
			jen.Id("q").Op(":=").Add(apply(goName(n.Q), jen.Id("x"))).Comment("[B, L, heads*head_dim]"),
			jen.Id("k").Op(":=").Add(apply(goName(n.K), jen.Id("x"))).Comment("[B, L, kv_heads*head_dim]"),
			jen.Id("v").Op(":=").Add(apply(goName(n.V), jen.Id("x"))).Comment("[B, L, kv_heads*head_dim]"),
		)
	}
	qkNorm := []jen.Code{
		jen.Id("q").Op("=").Add(apply(goName(n.QNorm), jen.Id("q"))),
		jen.Id("k").Op("=").Add(apply(goName(n.KNorm), jen.Id("k"))),
	}
	if a.Attn.QKNorm == "full_width" {
		body = append(body, qkNorm...)
	}
	body = append(body,
		jen.Id("q").Op("=").Add(call("Reshape", jen.Id("q"), jen.Id("B"), jen.Id("L"), m("heads"), m("headDim"))).Comment("[B, L, heads, head_dim]"),
		jen.Id("k").Op("=").Add(call("Reshape", jen.Id("k"), jen.Id("B"), jen.Id("L"), m("kvHeads"), m("headDim"))).Comment("[B, L, kv_heads, head_dim]"),
		jen.Id("v").Op("=").Add(call("Reshape", jen.Id("v"), jen.Id("B"), jen.Id("L"), m("kvHeads"), m("headDim"))).Comment("[B, L, kv_heads, head_dim]"),
	)
	if a.Attn.QKNorm == "per_head" {
		body = append(body, qkNorm...)
	}
	body = append(body,
		jen.Id("q").Op("=").Add(call("Transpose", jen.Id("q"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3))).Comment("[B, heads, L, head_dim]"),
		jen.Id("k").Op("=").Add(call("Transpose", jen.Id("k"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3))).Comment("[B, kv_heads, L, head_dim]"),
		jen.Id("v").Op("=").Add(call("Transpose", jen.Id("v"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3))).Comment("[B, kv_heads, L, head_dim]"),
	)
	if a.HasRope() {
		body = append(body,
			jen.Id("offset").Op(":=").Id("c").Dot("Offset").Call(),
			jen.Id("q").Op("=").Id("l").Dot("rope").Dot("Apply").Call(g(), jen.Id("q"), jen.Id("offset")),
			jen.Id("k").Op("=").Id("l").Dot("rope").Dot("Apply").Call(g(), jen.Id("k"), jen.Id("offset")),
		)
	}
	if a.Attn.QKNorm == "per_head_after_rope" {
		body = append(body, qkNorm...)
	}
	update := jen.Id("c").Dot("Update").Call(g(), jen.Id("k"), jen.Id("v"))
	if a.Attn.Softcap != nil {
		body = append(body, jen.Id("o").Op(":=").Qual(nnPkg, "SoftcapAttention").Call(g(), jen.Id("q"), update, jen.Float64().Call(m("scale")), m("attnSoftcap"), jen.Id("mask")).Comment("[B, heads, L, head_dim]"))
	} else {
		attend := "Attention"
		if a.Attn.Float32 {
			attend = "AttentionFloat32"
		}
		body = append(body, jen.Id("o").Op(":=").Qual(kvPkg, attend).Call(g(), jen.Id("q"), update, m("scale"), jen.Id("mask")).Comment("[B, heads, L, head_dim]"))
	}
	body = append(body,
		jen.Id("o").Op("=").Add(call("Reshape", call("Transpose", jen.Id("o"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3)), jen.Id("B"), jen.Id("L"), hd("heads"))).Comment("[B, L, heads*head_dim]"),
		jen.Return(apply(goName(n.O), jen.Id("o"))),
	)
	doc := "attention is grouped-query self-attention over x [B, L, hidden]"
	switch {
	case a.HasRope() && a.Rope.Layers != nil:
		doc += ", with rotary positions on the layers that have them"
	case a.HasRope():
		doc += ", with rotary positions"
	}
	if a.Attn.Softcap != nil {
		doc += "; scores are soft-capped, so attention is written out rather than fused"
	}
	if a.Attn.Float32 {
		doc += "; queries and keys attend in float32, and the result is cast back to the values' dtype"
	}
	f.Comment(comment(doc + "."))
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("attention").Params(
		graphParam(), jen.Id("l").Op("*").Id("Layer"), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

var mlpDoc = map[MLPKind]string{
	"swiglu":          "the SwiGLU feed-forward block: down(silu(gate(x)) * up(x))",
	"gelu_gated":      "the GELU-gated feed-forward block: down(gelu(gate(x)) * up(x)), exact (erf) GELU",
	"gelu_tanh_gated": "the GELU-gated feed-forward block: down(gelu(gate(x)) * up(x)), tanh-approximate GELU",
	"fused_swiglu":    "the SwiGLU feed-forward block with gate and up fused in one projection: down(silu(gate) * up)",
	"gelu":            "the plain feed-forward block: proj(gelu(fc(x))), exact (erf) GELU",
	"relu2":           "the ungated feed-forward block: down(relu(up(x))²)",
}

func emitMLP(f *jen.File, a *Arch) {
	n := a.Names
	p := func(field string, x jen.Code) *jen.Statement {
		return jen.Id("p").Dot(goName(field)).Dot("Apply").Call(g(), x)
	}
	var body []jen.Code
	switch a.MLP.Kind {
	case "swiglu", "gelu_gated", "gelu_tanh_gated":
		act := map[MLPKind]string{"swiglu": "SiLU", "gelu_gated": "GELU", "gelu_tanh_gated": "GELUApprox"}[a.MLP.Kind]
		body = []jen.Code{
			jen.Id("gate").Op(":=").Add(p(n.Gate, jen.Id("x"))).Comment("[B, L, intermediate]"),
			jen.Id("up").Op(":=").Add(p(n.Up, jen.Id("x"))).Comment("[B, L, intermediate]"),
			jen.Return(p(n.Down, call("Multiply", call(act, jen.Id("gate")), jen.Id("up")))),
		}
	case "fused_swiglu":
		body = []jen.Code{
			jen.Id("gu").Op(":=").Add(call("Split", p(n.GateUp, jen.Id("x")), jen.Lit(2), jen.Lit(-1))).Comment("gate, up: [B, L, intermediate] each"),
			jen.Return(p(n.Down, call("Multiply", call("SiLU", jen.Id("gu").Index(jen.Lit(0))), jen.Id("gu").Index(jen.Lit(1))))),
		}
	case "relu2":
		body = []jen.Code{
			jen.Return(p(n.Down, jen.Qual(nnPkg, "ReLUSquared").Call(g(), p(n.Up, jen.Id("x"))))),
		}
	case "gelu":
		body = []jen.Code{
			jen.Return(p(n.Proj, call("GELU", p(n.FC, jen.Id("x"))))),
		}
	}
	f.Comment(comment(fmt.Sprintf("mlp is %s.", mlpDoc[a.MLP.Kind])))
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("mlp").Params(graphParam(), jen.Id("p").Op("*").Id("MLP"), jen.Id("x").Add(arrayType())).Add(arrayType()).Block(body...)
}
