package gen

import (
	"github.com/dave/jennifer/jen"
)

// The ssd mixer: Mamba2's state-space layer (Mamba2, Granite 4.0-H,
// Nemotron-H, Falcon-H1). One projection gives an output gate z, x, B and
// C (through a short causal convolution and a silu) and a time step per
// head; each head's state (float32, head_dim × state_size) decays by
// exp(dt A) and takes dt x Bᵀ every step, and reads y = S C + D x. The
// output, gated by silu(z), is normed and projected back. Its cache keeps
// two slots: the convolution's last inputs and the scan's state. In the
// separate layout the projection gives z and x alone, and B, C and the
// time steps come from the convolved x by projections of their own.

func init() {
	registerMixer(&mixerKind{
		name: "ssd",
		options: []mixerOption{
			{key: "module", name: true, def: "mixer"},
			{key: "heads", typ: TInt, def: "num_heads"},
			{key: "head_dim", typ: TInt, def: "head_dim"},
			{key: "groups", typ: TInt, def: "n_groups"},
			{key: "state_size", typ: TInt, def: "ssm_state_size"},
			{key: "conv_kernel", typ: TInt, def: "conv_kernel"},
			{key: "conv_bias", typ: TBool, def: "use_conv_bias"},
			{key: "bias", typ: TBool, def: "use_bias"},
			{key: "dt_min", typ: TFloat, def: "time_step_limit[0]"},
			{key: "dt_max", typ: TFloat, def: "time_step_limit[1]"},
			{key: "norm_eps", typ: TFloat, def: "layer_norm_epsilon"},
			{key: "norm_groups", typ: TInt, def: "1"},
			{key: "out_bias", typ: TBool, like: "bias"},
			{key: "norm", typ: TBool, def: "true"},
			{key: "norm_before_gate", typ: TBool, def: "false"},
			{key: "with_attention", words: []string{"false", "true"}, def: "false"},
			{key: "projections", words: []string{"fused", "separate"}, def: "fused"},
			{key: "dt_rank", typ: TInt, def: "0"},
		},
		resolve: resolveSSD,
	})
}

// SSD is an ssd mixer, resolved.
type SSD struct {
	none
	Heads, HeadDim, Groups, StateSize, Kernel, ConvBias, Bias *Value
	DtMin, DtMax, Eps, NormGroups, OutBias                    *Value
	// Norm: the output has its norm (else it is silu(z) · y alone);
	// NormBefore: normed before the gate rather than after.
	Norm, NormBefore *Value
	// WithAttention: its layers attend too, beside it (Falcon-H1).
	WithAttention bool
	// Separate: in_proj gives z and x alone, and bcdt_proj and dt_proj
	// make B, C and the time steps (DtRank wide before dt_proj) from the
	// convolved x (PLaMo 2).
	Separate bool
	DtRank   *Value

	name                      string
	self                      *field // the Layer's *StateSpace
	heads, dtMin, dtMax, nGrp *field
	normBefore                *field
	inProj, outProj           Proj
	conv, dtBias, aLog, d     *field
	norm                      *field
	split                     *field // the separate layout's modules
}

const rSSD = "s"

func resolveSSD(o *mixerOptions, a *Arch) (mixer, error) {
	d := &SSD{
		Heads: o.value("heads"), HeadDim: o.value("head_dim"), Groups: o.value("groups"),
		StateSize: o.value("state_size"), Kernel: o.value("conv_kernel"), ConvBias: o.value("conv_bias"),
		Bias: o.value("bias"), DtMin: o.value("dt_min"), DtMax: o.value("dt_max"),
		Eps: o.value("norm_eps"), NormGroups: o.value("norm_groups"),
		OutBias: o.value("out_bias"), Norm: o.value("norm"), NormBefore: o.value("norm_before_gate"),
		WithAttention: o.word("with_attention") == "true",
		Separate:      o.word("projections") == "separate",
		DtRank:        o.value("dt_rank"),
		name:          o.word("module"),
	}
	if _, set := o.at["dt_rank"]; set != d.Separate {
		if d.Separate {
			return nil, o.errAt("dt_rank", "missing: the separate layout's time-step input width (bcdt_proj's last part, dt_proj's input)")
		}
		return nil, o.errAt("dt_rank", "only the separate layout (projections: separate) has a time-step input of its own")
	}
	if one, ok := d.Groups.lit.(int); d.Separate && (!d.Groups.isLit || !ok || one != 1) {
		return nil, o.errAt("groups", "the separate layout reads one group of B and C (its norms' weights are state_size wide): set it to 1")
	}
	d.self = newField(goName(d.name), func() *jen.Statement { return jen.Op("*").Id("StateSpace") }, d.name)
	d.heads = newField("heads", func() *jen.Statement { return jen.Qual(nnPkg, "SSDHeads") }, "")
	d.dtMin = newField("dtMin", float32Type, "the time steps' lower clip")
	d.dtMax = newField("dtMax", float32Type, "and upper")
	d.nGrp = newField("normGroups", intType, "the output norm's groups (1: the full width)")
	d.normBefore = newField("normBefore", func() *jen.Statement { return jen.Bool() }, "the output normed before the gate")
	heads := func(method string) func() *jen.Statement {
		return func() *jen.Statement { return d.heads.of(rSSD).Dot(method).Call() }
	}
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	d.inProj = Proj{Field: linear("in_proj"), Name: "in_proj", Out: heads("ProjWidth"), In: hidden, Bias: d.Bias}
	d.outProj = Proj{Field: linear("out_proj"), Name: "out_proj", Out: hidden, In: heads("Width"), Bias: d.OutBias}
	array := func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }
	d.conv = newField("Conv1D", nnType("ShortConv"), "conv1d: over x, B and C")
	d.dtBias = newField("DtBias", array, "dt_bias")
	d.aLog = newField("ALog", array, "A_log: A = -exp(A_log)")
	d.d = newField("D", array, "D: the skip connection")
	d.norm = newField("Norm", nnType("RMSNorm"), "norm: of the output gated by silu(z) (nil: none)")
	d.split = newField("Split", func() *jen.Statement { return jen.Op("*").Qual(nnPkg, "SSDSplit") }, "bcdt_proj, dt_proj and the B, C and dt norms")
	return d, nil
}

func (d *SSD) typeName() goType      { return "StateSpace" }
func (d *SSD) field() *field         { return d.self }
func (d *SSD) recv() string          { return rSSD }
func (d *SSD) typeDoc() string       { return "state-space (Mamba2) mixer" }
func (d *SSD) states() int           { return 2 }
func (d *SSD) besideAttention() bool { return d.WithAttention }

func (d *SSD) fields(t goType) []jen.Code {
	if t != d.typeName() {
		return nil
	}
	out := []jen.Code{d.inProj.Field.decl(), d.conv.decl()}
	if d.Separate {
		out = append(out, d.split.decl())
	}
	return append(out, d.dtBias.decl(), d.aLog.decl(), d.d.decl(), d.norm.decl(), d.outProj.Field.decl())
}

func (d *SSD) params(t goType) []jen.Code {
	if t != d.typeName() {
		return nil
	}
	return []jen.Code{d.heads.decl(), d.dtMin.decl(), d.dtMax.decl(), d.nGrp.decl(), d.normBefore.decl()}
}

func (d *SSD) inits(t goType) []kvPair {
	if t != d.typeName() {
		return nil
	}
	shape := []kvPair{
		{"Heads", d.Heads.Code()},
		{"HeadDim", d.HeadDim.Code()},
		{"Groups", d.Groups.Code()},
		{"StateSize", d.StateSize.Code()},
	}
	if d.Separate {
		shape = append(shape, kvPair{"Separate", jen.True()})
	}
	return []kvPair{
		{d.heads.key(), jen.Qual(nnPkg, "SSDHeads").Values(fieldsOf(shape)...)},
		{d.dtMin.key(), jen.Float32().Call(d.DtMin.Code())},
		{d.dtMax.key(), jen.Float32().Call(d.DtMax.Code())},
		{d.nGrp.key(), d.NormGroups.Code()},
		{d.normBefore.key(), d.NormBefore.Code()},
	}
}

// build loads its modules, in the branch of the layers it mixes.
func (d *SSD) build(s stage) []jen.Code {
	if s != sLayer {
		return nil
	}
	heads := func() *jen.Statement { return d.heads.of(rSSD).Dot("Heads") }
	vec := func(f *field, n string) jen.Code {
		return f.of(rSSD).Op("=").Id("lw").Dot("Vector").Call(jen.Lit(d.name+"."+n), heads())
	}
	var norm jen.Code = d.norm.of(rSSD).Op("=").Id("lw").Dot("RMSNorm").Call(jen.Lit(d.name+".norm"), d.heads.of(rSSD).Dot("Width").Call(), d.Eps.Code())
	if !d.Norm.IsTrue() {
		norm = jen.If(d.Norm.Code()).Block(norm)
	}
	out := []jen.Code{
		d.inProj.load(rSSD, d.name),
		d.conv.of(rSSD).Op("=").Id("lw").Dot("ShortConv").Call(jen.Lit(d.name+".conv1d"), d.heads.of(rSSD).Dot("ConvWidth").Call(), d.Kernel.Code(), d.ConvBias.Code()),
	}
	if d.Separate {
		out = append(out, d.split.of(rSSD).Op("=").Id("lw").Dot("SSDSplit").Call(jen.Lit(d.name), d.heads.of(rSSD), d.DtRank.Code(), d.Eps.Code()))
	}
	return append(out,
		vec(d.dtBias, "dt_bias"),
		d.aLog.of(rSSD).Op("=").Id("lw").Dot("PreciseVector").Call(jen.Lit(d.name+".A_log"), heads()),
		vec(d.d, "D"),
		norm,
		d.outProj.load(rSSD, d.name),
	)
}

// emitForward writes StateSpace.forward:
//
//	func (s *StateSpace) forward(g, x, mask, c) *mlx.Array {
//		st := nn.StatesOf(g, c, 2)
//		scan := &mlx.SSM{ALog: s.ALog, D: s.D, DtBias: s.DtBias, DtMin: s.dtMin, DtMax: s.dtMax}
//		y, z := nn.SSD(g, st, s.InProj.Apply(g, x), s.Conv1D, scan, s.heads)
//		st.Advance(L)
//		return s.OutProj.Apply(g, nn.SSDOutput(g, s.Norm, y, z, s.normGroups, s.normBefore))
//	}
func (d *SSD) emitForward(f *jen.File) {
	self := func(fl *field) *jen.Statement { return fl.of(rSSD) }
	body := []jen.Code{
		jen.Id("st").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(d.states())).Comment("slot 0: the convolution's last inputs; 1: the scan's state"),
		jen.Id("scan").Op(":=").Op("&").Qual(mlxPkg, "SSM").Values(fieldsOf([]kvPair{
			{"ALog", self(d.aLog)}, {"D", self(d.d)}, {"DtBias", self(d.dtBias)}, {"DtMin", self(d.dtMin)}, {"DtMax", self(d.dtMax)},
		})...),
		jen.List(jen.Id("y"), jen.Id("z")).Op(":=").Add(d.middle()).Comment("[B, L, heads*head_dim] each"),
		jen.Id("st").Dot("Advance").Call(jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
		jen.Return(apply(self(d.outProj.Field), jen.Qual(nnPkg, "SSDOutput").Call(g(), self(d.norm), jen.Id("y"), jen.Id("z"), self(d.nGrp), self(d.normBefore)))),
	}
	f.Comment(comment("forward is the state-space scan over x [B, L, hidden], its output gated by silu(z) and normed, reading and updating the layer's state cache (mask is the attention layers'; a recurrent layer runs one sequence a row and reads none)."))
	f.Func().Params(jen.Id(rSSD).Op("*").Id("StateSpace")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// middle spells the call of the mixer's middle on in_proj's output.
func (d *SSD) middle() *jen.Statement {
	self := func(fl *field) *jen.Statement { return fl.of(rSSD) }
	proj := apply(self(d.inProj.Field), jen.Id("x"))
	if d.Separate {
		return jen.Qual(nnPkg, "SSDSeparate").Call(g(), jen.Id("st"), proj, self(d.conv), self(d.split), jen.Id("scan"), self(d.heads))
	}
	return jen.Qual(nnPkg, "SSD").Call(g(), jen.Id("st"), proj, self(d.conv), jen.Id("scan"), self(d.heads))
}

// shard: the heads would split with their convolution channels, groups and
// states; no plan does that yet.
func (d *SSD) shard(p *ShardPlan, a *Arch) {
	p.refuse("its ssd layers (%s) have no tensor-parallel plan: their heads, convolution channels, groups and states would split together", d.name)
}
