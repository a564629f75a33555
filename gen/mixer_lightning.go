package gen

import (
	"github.com/dave/jennifer/jen"
)

// The lightning mixer: linear attention with a constant decay per head
// (Bailing's linear layers). One projection gives q, k and v for each of
// its heads; q and k pass RMSNorms per head where qk_norm holds and the
// architecture's rope from the layer's offset; a state per head, S ← a S
// + kᵀ v with a = e^{-slope · factor} (ALiBi's slope of the head, a
// factor per layer), gives each step's output scale · q S; the output is
// RMSNormed in groups, gated by a sigmoid of its own projection of the
// layer's input, and projected back. Its cache keeps one slot: the state.

func init() {
	registerMixer(&mixerKind{
		name: "lightning",
		options: []mixerOption{
			{key: "module", name: true, def: "attention"},
			{key: "heads", typ: TInt, def: "num_attention_heads"},
			{key: "head_dim", typ: TInt, def: "hidden_size // num_attention_heads"},
			{key: "qk_norm", typ: TBool, def: "false"},
			{key: "norm_eps", typ: TFloat, def: "rms_norm_eps"},
			{key: "groups", typ: TInt, def: "1"},
			{key: "qkv_bias", typ: TBool, def: "false"},
			{key: "out_bias", typ: TBool, def: "false"},
			{key: "decay_factor", typ: TFloat, perLayer: true, def: "1.0"},
		},
		resolve: resolveLightning,
	})
}

// LightningMixer is a lightning mixer, resolved.
type LightningMixer struct {
	none
	Heads, HeadDim, QKNorm, Eps, Groups, QKVBias, OutBias *Value
	// Factor scales the heads' slopes in each layer (it reads i).
	Factor *Value

	name                string
	self                *field // the Layer's *Lightning
	heads               *field
	rope                *field
	qkv, gProj, dense   Proj
	qNorm, kNorm, gNorm *field
	decay               *field
}

const rLightning = "n"

func resolveLightning(o *mixerOptions, a *Arch) (mixer, error) {
	if a.Rope == nil || !a.Rope.Rotates() {
		return nil, errAt(o.pos, o.path, "a lightning mixer rotates q and k with the architecture's rope: structure.rope must rotate")
	}
	m := &LightningMixer{
		Heads: o.value("heads"), HeadDim: o.value("head_dim"), QKNorm: o.value("qk_norm"),
		Eps: o.value("norm_eps"), Groups: o.value("groups"),
		QKVBias: o.value("qkv_bias"), OutBias: o.value("out_bias"),
		Factor: o.value("decay_factor"),
		name:   o.word("module"),
	}
	m.self = newField(goName(m.name), func() *jen.Statement { return jen.Op("*").Id("Lightning") }, m.name)
	m.heads = newField("heads", func() *jen.Statement { return jen.Qual(nnPkg, "LightningHeads") }, "")
	m.rope = newField("rope", func() *jen.Statement { return jen.Qual(nnPkg, "Rope") }, "the architecture's rope")
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	width := func() *jen.Statement { return m.heads.of(rLightning).Dot("Width").Call() }
	no := &Value{Text: "false", code: jen.False(), isLit: true, lit: false}
	m.qkv = Proj{Field: linear("query_key_value"), Name: "query_key_value", Out: func() *jen.Statement { return jen.Lit(3).Op("*").Add(width()) }, In: hidden, Bias: m.QKVBias}
	m.gProj = Proj{Field: linear("g_proj"), Name: "g_proj", Out: width, In: hidden, Bias: no}
	m.dense = Proj{Field: linear("dense"), Name: "dense", Out: hidden, In: width, Bias: m.OutBias}
	m.qNorm = newField("QueryLayernorm", nnType("RMSNorm"), "query_layernorm: per head (nil where qk_norm does not hold)")
	m.kNorm = newField("KeyLayernorm", nnType("RMSNorm"), "key_layernorm: per head (nil where qk_norm does not hold)")
	m.gNorm = newField("GNorm", nnType("RMSNorm"), "g_norm: the output's weight, normed in groups")
	m.decay = newField("Decay", func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }, "each head's decay a step, float32 [heads] (made at load)")
	return m, nil
}

func (m *LightningMixer) typeName() goType      { return "Lightning" }
func (m *LightningMixer) field() *field         { return m.self }
func (m *LightningMixer) recv() string          { return rLightning }
func (m *LightningMixer) typeDoc() string       { return "lightning attention" }
func (m *LightningMixer) states() int           { return 1 }
func (m *LightningMixer) besideAttention() bool { return false }

func (m *LightningMixer) fields(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	return []jen.Code{m.qkv.Field.decl(), m.qNorm.decl(), m.kNorm.decl(), m.gProj.Field.decl(), m.gNorm.decl(), m.dense.Field.decl(), m.decay.decl()}
}

func (m *LightningMixer) params(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	return []jen.Code{m.heads.decl(), m.rope.decl()}
}

func (m *LightningMixer) inits(t goType) []kvPair {
	if t != m.typeName() {
		return nil
	}
	heads := []kvPair{
		{"Heads", m.Heads.Code()},
		{"Dim", m.HeadDim.Code()},
		{"Groups", m.Groups.Code()},
		{"Scale", jen.Qual("math", "Pow").Call(jen.Float64().Call(m.HeadDim.Code()), jen.Lit(-0.5))},
	}
	return []kvPair{{m.heads.key(), jen.Qual(nnPkg, "LightningHeads").Values(fieldsOf(heads)...)}, {m.rope.key(), jen.Id("rope")}}
}

// build loads its modules, in the branch of the layers it mixes:
//
//	n.QueryKeyValue = lw.Linear("attention.query_key_value", 3*n.heads.Width(), m.hidden, c.UseQKVBias)
//	if c.UseQKNorm { n.QueryLayernorm = lw.RMSNorm(...); n.KeyLayernorm = ... }
//	n.GProj = ...; n.GNorm = lw.RMSNorm("attention.g_norm", n.heads.Width(), eps); n.Dense = ...
//	n.Decay = lw.LightningDecay(n.heads.Heads, <factor of layer i>)
func (m *LightningMixer) build(s stage) []jen.Code {
	if s != sLayer {
		return nil
	}
	self := func(f *field) *jen.Statement { return f.of(rLightning) }
	name := func(n string) jen.Code { return jen.Lit(m.name + "." + n) }
	heads := func(f string) *jen.Statement { return m.heads.of(rLightning).Dot(f) }
	norm := func(f *field, n string, dims jen.Code) *jen.Statement {
		return self(f).Op("=").Id("lw").Dot("RMSNorm").Call(name(n), dims, m.Eps.Code())
	}
	var qk []jen.Code = []jen.Code{norm(m.qNorm, "query_layernorm", heads("Dim")), norm(m.kNorm, "key_layernorm", heads("Dim"))}
	out := []jen.Code{m.qkv.load(rLightning, m.name)}
	switch {
	case m.QKNorm.IsTrue():
		out = append(out, qk...)
	case !m.QKNorm.IsFalse():
		out = append(out, jen.If(m.QKNorm.Code()).Block(qk...))
	}
	return append(out,
		m.gProj.load(rLightning, m.name),
		norm(m.gNorm, "g_norm", heads("Width").Call()),
		m.dense.load(rLightning, m.name),
		self(m.decay).Op("=").Id("lw").Dot("LightningDecay").Call(heads("Heads"), m.Factor.Code()),
	)
}

// emitForward writes Lightning.forward:
//
//	func (n *Lightning) forward(g, x, mask, c) *mlx.Array {
//		st := nn.StatesOf(g, c, 1)
//		y := nn.LightningMix(g, st, 0, n.QueryKeyValue.Apply(g, x), n.QueryLayernorm, n.KeyLayernorm, n.rope, n.Decay, n.heads)
//		st.Advance(x.Dim(1))
//		y = g.Multiply(nn.GroupRMSNorm(g, n.GNorm, y, n.heads.Groups), g.Sigmoid(n.GProj.Apply(g, x)))
//		return n.Dense.Apply(g, y)
//	}
func (m *LightningMixer) emitForward(f *jen.File) {
	self := func(fl *field) *jen.Statement { return fl.of(rLightning) }
	body := []jen.Code{
		jen.Id("st").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(m.states())).Comment("slot 0: the state [B, heads, head_dim, head_dim]"),
		jen.Id("y").Op(":=").Qual(nnPkg, "LightningMix").Call(g(), jen.Id("st"), jen.Lit(0), apply(self(m.qkv.Field), jen.Id("x")),
			self(m.qNorm), self(m.kNorm), self(m.rope), self(m.decay), self(m.heads)).Comment("[B, L, heads x head_dim]"),
		jen.Id("st").Dot("Advance").Call(jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
		jen.Id("y").Op("=").Add(call("Multiply",
			jen.Qual(nnPkg, "GroupRMSNorm").Call(g(), self(m.gNorm), jen.Id("y"), self(m.heads).Dot("Groups")),
			call("Sigmoid", apply(self(m.gProj.Field), jen.Id("x"))))),
		jen.Return(apply(self(m.dense.Field), jen.Id("y"))),
	}
	f.Comment(comment("forward is lightning attention over x [B, L, hidden]: q, k and v normed and rotated as attention's are, the constant-decay recurrence per head from the layer's state cache, the output normed in groups and gated by a sigmoid (mask is the attention layers'; a recurrent layer runs one sequence a row and reads none)."))
	f.Func().Params(jen.Id(rLightning).Op("*").Id("Lightning")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// shard: the heads would split with their states and the output norm's
// groups; no plan does that yet.
func (m *LightningMixer) shard(p *ShardPlan, a *Arch) {
	p.refuse("its lightning layers (%s) have no tensor-parallel plan: their heads, states and the output norm's groups would split together", m.name)
}
