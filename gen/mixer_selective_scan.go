package gen

import (
	"github.com/dave/jennifer/jen"
)

// The selective_scan mixer: Mamba's (Mamba1's) layer. in_proj gives x and
// a gate z; x passes a short causal convolution and a silu; every step
// x_proj gives the time-step input, B and C, dt_proj and a softplus the
// time steps, and each inner channel's state decays by exp(dt A) and
// takes dt x B; y = state · C + D x, gated by silu(z), and out_proj
// projects it back. Its cache keeps two slots: the convolution's last
// inputs and the state, in the activations' dtype.

func init() {
	registerMixer(&mixerKind{
		name: "selective_scan",
		options: []mixerOption{
			{key: "module", name: true, def: "mixer"},
			{key: "inner", typ: TInt, def: "intermediate_size"},
			{key: "state_size", typ: TInt, def: "state_size"},
			{key: "conv_kernel", typ: TInt, def: "conv_kernel"},
			{key: "conv_bias", typ: TBool, def: "use_conv_bias"},
			{key: "bias", typ: TBool, def: "use_bias"},
			{key: "dt_rank", typ: TInt, def: "time_step_rank"},
			{key: "bcdt_norm", typ: TBool, def: "false"},
			{key: "bcdt_eps", typ: TFloat, def: "1.0e-6"},
			{key: "bcdt_weights", words: []string{"false", "true"}, def: "false"},
			{key: "order", words: []string{"steps", "sequence"}, def: "steps"},
		},
		resolve: resolveSelectiveScan,
	})
}

// SelectiveScanMixer is a selective_scan mixer, resolved.
type SelectiveScanMixer struct {
	none
	Inner, StateSize, Kernel, ConvBias, Bias, DtRank, Norm, Eps *Value
	// Weights: the time-step input's, B's and C's norms have weights
	// (dt_layernorm, b_layernorm, c_layernorm); Sequence: Jamba's order.
	Weights, Sequence bool

	name                          string
	self                          *field // the Layer's *SelectiveScan
	inProj, outProj, xProj, dtPrj Proj
	conv, decay, d, scan          *field
	norms                         []*field // dt_layernorm, b_layernorm, c_layernorm (Weights)
}

const rScan = "s"

func resolveSelectiveScan(o *mixerOptions, a *Arch) (mixer, error) {
	m := &SelectiveScanMixer{
		Inner: o.value("inner"), StateSize: o.value("state_size"), Kernel: o.value("conv_kernel"),
		ConvBias: o.value("conv_bias"), Bias: o.value("bias"), DtRank: o.value("dt_rank"),
		Norm: o.value("bcdt_norm"), Eps: o.value("bcdt_eps"),
		Weights: o.word("bcdt_weights") == "true", Sequence: o.word("order") == "sequence",
		name: o.word("module"),
	}
	for _, n := range []string{"dt_layernorm", "b_layernorm", "c_layernorm"} {
		m.norms = append(m.norms, newField(goName(n), nnType("RMSNorm"), n))
	}
	m.self = newField(goName(m.name), func() *jen.Statement { return jen.Op("*").Id("SelectiveScan") }, m.name)
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	inner := func() *jen.Statement { return jen.Add(m.Inner.Code()) }
	no := &Value{Text: "false", code: jen.False(), isLit: true, lit: false}
	yes := &Value{Text: "true", code: jen.True(), isLit: true, lit: true}
	m.inProj = Proj{Field: linear("in_proj"), Name: "in_proj", Out: func() *jen.Statement { return jen.Lit(2).Op("*").Add(inner()) }, In: hidden, Bias: m.Bias}
	m.xProj = Proj{Field: linear("x_proj"), Name: "x_proj", Out: func() *jen.Statement {
		return jen.Add(m.DtRank.Code()).Op("+").Lit(2).Op("*").Add(m.StateSize.Code())
	}, In: inner, Bias: no}
	m.dtPrj = Proj{Field: linear("dt_proj"), Name: "dt_proj", Out: inner, In: func() *jen.Statement { return jen.Add(m.DtRank.Code()) }, Bias: yes}
	m.outProj = Proj{Field: linear("out_proj"), Name: "out_proj", Out: hidden, In: inner, Bias: m.Bias}
	array := func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }
	m.conv = newField("Conv1D", nnType("ShortConv"), "conv1d: depthwise, causal")
	m.decay = newField("A", array, "A [inner, state] = -exp(A_log), made at load")
	m.d = newField("D", array, "D: the skip connection")
	m.scan = newField("scan", nnType("SelectiveScan"), "the scan's parameters, wired at load")
	return m, nil
}

func (m *SelectiveScanMixer) typeName() goType      { return "SelectiveScan" }
func (m *SelectiveScanMixer) field() *field         { return m.self }
func (m *SelectiveScanMixer) recv() string          { return rScan }
func (m *SelectiveScanMixer) typeDoc() string       { return "selective scan (Mamba)" }
func (m *SelectiveScanMixer) states() int           { return 2 }
func (m *SelectiveScanMixer) besideAttention() bool { return false }

func (m *SelectiveScanMixer) fields(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	out := []jen.Code{m.inProj.Field.decl(), m.conv.decl(), m.xProj.Field.decl(), m.dtPrj.Field.decl(), m.decay.decl(), m.d.decl(), m.outProj.Field.decl()}
	if m.Weights {
		for _, n := range m.norms {
			out = append(out, n.decl())
		}
	}
	return out
}

func (m *SelectiveScanMixer) params(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	return []jen.Code{m.scan.decl()}
}

// build loads its modules and wires the scan, in the branch of the layers
// it mixes.
func (m *SelectiveScanMixer) build(s stage) []jen.Code {
	if s != sLayer {
		return nil
	}
	self := func(f *field) *jen.Statement { return f.of(rScan) }
	scan := []kvPair{
		{"XProj", self(m.xProj.Field)}, {"DtProj", self(m.dtPrj.Field)}, {"A", self(m.decay)}, {"D", self(m.d)},
		{"DtRank", m.DtRank.Code()}, {"StateSize", m.StateSize.Code()},
		{"BCDtNorm", m.Norm.Code()}, {"NormEps", jen.Float32().Call(m.Eps.Code())},
	}
	var norms []jen.Code
	if m.Weights {
		widths := []jen.Code{m.DtRank.Code(), m.StateSize.Code(), m.StateSize.Code()}
		for i, n := range m.norms {
			norms = append(norms, self(n).Op("=").Id("lw").Dot("RMSNorm").Call(jen.Lit(m.name+"."+n.doc), widths[i], m.Eps.Code()))
		}
		scan = append(scan, kvPair{"DtNorm", self(m.norms[0])}, kvPair{"BNorm", self(m.norms[1])}, kvPair{"CNorm", self(m.norms[2])})
	}
	if m.Sequence {
		scan = append(scan, kvPair{"Sequence", jen.True()})
	}
	out := []jen.Code{
		m.inProj.load(rScan, m.name),
		self(m.conv).Op("=").Id("lw").Dot("ShortConv").Call(jen.Lit(m.name+".conv1d"), m.Inner.Code(), m.Kernel.Code(), m.ConvBias.Code()),
		m.xProj.load(rScan, m.name),
		m.dtPrj.load(rScan, m.name),
		self(m.decay).Op("=").Id("lw").Dot("Decay").Call(jen.Lit(m.name+".A_log"), m.Inner.Code(), m.StateSize.Code()),
		self(m.d).Op("=").Id("lw").Dot("Vector").Call(jen.Lit(m.name+".D"), m.Inner.Code()),
		m.outProj.load(rScan, m.name),
	}
	out = append(out, norms...)
	return append(out, self(m.scan).Op("=").Op("&").Qual(nnPkg, "SelectiveScan").Values(fieldsOf(scan)...))
}

// emitForward writes SelectiveScan.forward:
//
//	func (s *SelectiveScan) forward(g, x, mask, c) *mlx.Array {
//		st := nn.StatesOf(g, c, 2)
//		xz := g.Split(s.InProj.Apply(g, x), 2, -1)
//		y := s.scan.Apply(g, st, 1, s.Conv1D.ApplySiLU(g, st, 0, xz[0]))
//		st.Advance(L)
//		return s.OutProj.Apply(g, g.SwiGLU(xz[1], y))
//	}
func (m *SelectiveScanMixer) emitForward(f *jen.File) {
	self := func(fl *field) *jen.Statement { return fl.of(rScan) }
	xz := func(i int) jen.Code { return jen.Id("xz").Index(jen.Lit(i)) }
	body := []jen.Code{
		jen.Id("st").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(m.states())).Comment("slot 0: the convolution's last inputs; 1: the scan's state"),
		jen.Id("xz").Op(":=").Add(call("Split", apply(self(m.inProj.Field), jen.Id("x")), jen.Lit(2), jen.Lit(-1))).Comment("x, z: [B, L, inner] each"),
		jen.Id("y").Op(":=").Add(self(m.scan).Dot("Apply").Call(g(), jen.Id("st"), jen.Lit(1), self(m.conv).Dot("ApplySiLU").Call(g(), jen.Id("st"), jen.Lit(0), xz(0)))),
		jen.Id("st").Dot("Advance").Call(jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
		jen.Return(apply(self(m.outProj.Field), call("SwiGLU", xz(1), jen.Id("y")))),
	}
	f.Comment(comment("forward is the selective scan over x [B, L, hidden], one step after another, its output gated by silu(z), reading and updating the layer's state cache (mask is the attention layers'; a recurrent layer runs one sequence a row and reads none)."))
	f.Func().Params(jen.Id(rScan).Op("*").Id("SelectiveScan")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// shard: the inner channels would split with their states and the
// low-rank time-step projection; no plan does that yet.
func (m *SelectiveScanMixer) shard(p *ShardPlan, a *Arch) {
	p.refuse("its selective_scan layers (%s) have no tensor-parallel plan: their inner channels, states and time-step projections would split together", m.name)
}
