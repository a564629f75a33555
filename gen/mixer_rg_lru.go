package gen

import (
	"github.com/dave/jennifer/jen"
)

// The rg_lru mixer: Griffin's recurrent block. Two branches of one input:
// y = gelu_tanh(linear_y(x)), and linear_x(x) through a depthwise causal
// convolution (with a bias, no activation) and the Real-Gated Linear
// Recurrent Unit; linear_out projects their product back. The unit's
// gates are block-diagonal linears (a [head_dim, head_dim] block per head)
// and a sigmoid; its decay a = exp(-8 · recurrent gate · softplus(Λ)); its
// state h = a h + sqrt(1 - a²) (input gate · x), the first position of a
// sequence taking its gated input unscaled. Its cache keeps two slots: the
// convolution's last inputs and h, both in the activations' dtype.

func init() {
	registerMixer(&mixerKind{
		name: "rg_lru",
		options: []mixerOption{
			{key: "module", name: true, def: "temporal_block"},
			{key: "width", typ: TInt, def: "hidden_size"},
			{key: "heads", typ: TInt, def: "num_attention_heads"},
			{key: "conv_kernel", typ: TInt, def: "4"},
		},
		resolve: resolveRGLRU,
	})
}

// RGLRUMixer is an rg_lru mixer, resolved.
type RGLRUMixer struct {
	none
	Width, Heads, Kernel *Value

	name                     string
	self                     *field // the Layer's *RGLRU
	linearY, linearX, outPrj Proj
	conv, unit               *field
}

const rLRU = "r"

func resolveRGLRU(o *mixerOptions, a *Arch) (mixer, error) {
	m := &RGLRUMixer{Width: o.value("width"), Heads: o.value("heads"), Kernel: o.value("conv_kernel"), name: o.word("module")}
	m.self = newField(goName(m.name), func() *jen.Statement { return jen.Op("*").Id("RGLRU") }, m.name)
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	width := func() *jen.Statement { return jen.Add(m.Width.Code()) }
	yes := &Value{Text: "true", code: jen.True(), isLit: true, lit: true}
	m.linearY = Proj{Field: linear("linear_y"), Name: "linear_y", Out: width, In: hidden, Bias: yes}
	m.linearX = Proj{Field: linear("linear_x"), Name: "linear_x", Out: width, In: hidden, Bias: yes}
	m.outPrj = Proj{Field: linear("linear_out"), Name: "linear_out", Out: hidden, In: width, Bias: yes}
	m.conv = newField("Conv1D", nnType("ShortConv"), "conv_1d: depthwise, causal, with a bias")
	m.unit = newField("RgLru", nnType("RGLRU"), "rg_lru: the gates, the decay's Λ, the recurrence")
	return m, nil
}

func (m *RGLRUMixer) typeName() goType      { return "RGLRU" }
func (m *RGLRUMixer) field() *field         { return m.self }
func (m *RGLRUMixer) recv() string          { return rLRU }
func (m *RGLRUMixer) typeDoc() string       { return "real-gated linear recurrent block" }
func (m *RGLRUMixer) states() int           { return 2 }
func (m *RGLRUMixer) besideAttention() bool { return false }

func (m *RGLRUMixer) fields(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	return []jen.Code{m.linearY.Field.decl(), m.linearX.Field.decl(), m.conv.decl(), m.unit.decl(), m.outPrj.Field.decl()}
}

// build loads its modules, in the branch of the layers it mixes.
func (m *RGLRUMixer) build(s stage) []jen.Code {
	if s != sLayer {
		return nil
	}
	self := func(f *field) *jen.Statement { return f.of(rLRU) }
	return []jen.Code{
		m.linearY.load(rLRU, m.name),
		m.linearX.load(rLRU, m.name),
		self(m.conv).Op("=").Id("lw").Dot("ShortConv").Call(jen.Lit(m.name+".conv_1d"), m.Width.Code(), m.Kernel.Code(), jen.True()),
		self(m.unit).Op("=").Id("lw").Dot("RGLRU").Call(jen.Lit(m.name+".rg_lru"), m.Width.Code(), m.Heads.Code()),
		m.outPrj.load(rLRU, m.name),
	}
}

// emitForward writes RGLRU.forward:
//
//	func (r *RGLRU) forward(g, x, mask, c) *mlx.Array {
//		st := nn.StatesOf(g, c, 2)
//		y := g.GELUApprox(r.LinearY.Apply(g, x))
//		h := r.RgLru.Apply(g, st, 1, r.Conv1D.Apply(g, st, 0, r.LinearX.Apply(g, x)))
//		st.Advance(L)
//		return r.LinearOut.Apply(g, g.Multiply(h, y))
//	}
func (m *RGLRUMixer) emitForward(f *jen.File) {
	self := func(fl *field) *jen.Statement { return fl.of(rLRU) }
	body := []jen.Code{
		jen.Id("st").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(m.states())).Comment("slot 0: the convolution's last inputs; 1: the recurrence's h"),
		jen.Id("y").Op(":=").Add(call("GELUApprox", apply(self(m.linearY.Field), jen.Id("x")))).Comment("[B, L, width]"),
		jen.Id("h").Op(":=").Add(self(m.conv).Dot("Apply").Call(g(), jen.Id("st"), jen.Lit(0), apply(self(m.linearX.Field), jen.Id("x")))),
		jen.Id("h").Op("=").Add(self(m.unit).Dot("Apply").Call(g(), jen.Id("st"), jen.Lit(1), jen.Id("h"))).Comment("[B, L, width]"),
		jen.Id("st").Dot("Advance").Call(jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
		jen.Return(apply(self(m.outPrj.Field), call("Multiply", jen.Id("h"), jen.Id("y")))),
	}
	f.Comment(comment("forward is the gated linear recurrence over x [B, L, hidden]: the convolved linear_x branch through the RG-LRU, times gelu_tanh of the linear_y branch, reading and updating the layer's state cache (mask is the attention layers'; a recurrent layer runs one sequence a row and reads none)."))
	f.Func().Params(jen.Id(rLRU).Op("*").Id("RGLRU")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// shard: the recurrence's channels would split with the projections'
// rows and the gates' heads; no plan does that yet.
func (m *RGLRUMixer) shard(p *ShardPlan, a *Arch) {
	p.refuse("its rg_lru layers (%s) have no tensor-parallel plan: their channels, gate heads and states would split with the projections", m.name)
}
