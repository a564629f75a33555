package gen

import (
	"github.com/dave/jennifer/jen"
)

// The short_conv mixer: LFM2's gated short convolution. One projection
// gives three streams b, c and x; b·x passes a depthwise causal
// convolution of a few taps, c gates its output, and a projection brings
// it back. Its cache keeps one slot: the convolution's last inputs.

func init() {
	registerMixer(&mixerKind{
		name: "short_conv",
		options: []mixerOption{
			{key: "conv_kernel", typ: TInt, def: "conv_L_cache"},
			{key: "bias", typ: TBool, def: "conv_bias"},
		},
		resolve: resolveShortConv,
	})
}

// ShortConvMixer is a short_conv mixer, resolved.
type ShortConvMixer struct {
	none
	Kernel, Bias *Value

	name            string
	self            *field // the Layer's *ShortConv
	inProj, outProj Proj
	conv            *field
}

const rShortConv = "s"

func resolveShortConv(o *mixerOptions, a *Arch) (mixer, error) {
	m := &ShortConvMixer{Kernel: o.value("conv_kernel"), Bias: o.value("bias"), name: "conv"}
	m.self = newField(goName(m.name), func() *jen.Statement { return jen.Op("*").Id("ShortConv") }, m.name)
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	m.inProj = Proj{Field: linear("in_proj"), Name: "in_proj", Out: func() *jen.Statement { return jen.Lit(3).Op("*").Add(hidden()) }, In: hidden, Bias: m.Bias}
	m.outProj = Proj{Field: linear("out_proj"), Name: "out_proj", Out: hidden, In: hidden, Bias: m.Bias}
	m.conv = newField("Conv", nnType("ShortConv"), "conv: depthwise, causal")
	return m, nil
}

func (m *ShortConvMixer) typeName() goType      { return "ShortConv" }
func (m *ShortConvMixer) field() *field         { return m.self }
func (m *ShortConvMixer) recv() string          { return rShortConv }
func (m *ShortConvMixer) typeDoc() string       { return "gated short convolution" }
func (m *ShortConvMixer) states() int           { return 1 }
func (m *ShortConvMixer) besideAttention() bool { return false }

func (m *ShortConvMixer) fields(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	return []jen.Code{m.inProj.Field.decl(), m.conv.decl(), m.outProj.Field.decl()}
}

// build loads its modules, in the branch of the layers it mixes.
func (m *ShortConvMixer) build(s stage) []jen.Code {
	if s != sLayer {
		return nil
	}
	return []jen.Code{
		m.inProj.load(rShortConv, m.name),
		m.conv.of(rShortConv).Op("=").Id("lw").Dot("ShortConv").Call(jen.Lit(m.name+".conv"), fHidden.of(rModel), m.Kernel.Code(), m.Bias.Code()),
		m.outProj.load(rShortConv, m.name),
	}
}

// emitForward writes ShortConv.forward:
//
//	func (s *ShortConv) forward(g, x, mask, c) *mlx.Array {
//		st := nn.StatesOf(g, c, 1)
//		bcx := g.Split(s.InProj.Apply(g, x), 3, -1) // b, c, x
//		y := g.Multiply(bcx[1], s.Conv.Apply(g, st, 0, g.Multiply(bcx[0], bcx[2])))
//		st.Advance(L)
//		return s.OutProj.Apply(g, y)
//	}
func (m *ShortConvMixer) emitForward(f *jen.File) {
	self := func(fl *field) *jen.Statement { return fl.of(rShortConv) }
	bcx := func(i int) jen.Code { return jen.Id("bcx").Index(jen.Lit(i)) }
	body := []jen.Code{
		jen.Id("st").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(m.states())).Comment("slot 0: the convolution's last inputs"),
		jen.Id("bcx").Op(":=").Add(call("Split", apply(self(m.inProj.Field), jen.Id("x")), jen.Lit(3), jen.Lit(-1))).Comment("b, c, x: [B, L, hidden] each"),
		jen.Id("y").Op(":=").Add(call("Multiply", bcx(1), self(m.conv).Dot("Apply").Call(g(), jen.Id("st"), jen.Lit(0), call("Multiply", bcx(0), bcx(2))))),
		jen.Id("st").Dot("Advance").Call(jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
		jen.Return(apply(self(m.outProj.Field), jen.Id("y"))),
	}
	f.Comment(comment("forward is the gated short convolution over x [B, L, hidden]: c times the convolution of b times x, reading and updating the layer's state cache (mask is the attention layers'; a recurrent layer runs one sequence a row and reads none)."))
	f.Func().Params(jen.Id(rShortConv).Op("*").Id("ShortConv")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// shard: the convolution's channels would split with the projections'
// rows; no plan does that yet.
func (m *ShortConvMixer) shard(p *ShardPlan, a *Arch) {
	p.refuse("its short_conv layers (%s) have no tensor-parallel plan: their convolution channels and states would split with the projections", m.name)
}
