package gen

import (
	"github.com/dave/jennifer/jen"
)

// The gated_delta mixer: linear attention by the gated delta rule
// (Qwen3-Next, Qwen3.5). Its projections give q, k and v (through a short
// causal convolution and a silu), an output gate z, a write strength b and
// a decay input a; q and k are normalised, the rule updates a state per
// value head, and the output is normed per value head, gated by silu(z)
// and projected back. Its cache keeps two slots: the convolution's last
// inputs and the rule's state.

func init() {
	registerMixer(&mixerKind{
		name: "gated_delta",
		options: []mixerOption{
			{key: "key_heads", typ: TInt, def: "linear_num_key_heads"},
			{key: "value_heads", typ: TInt, def: "linear_num_value_heads"},
			{key: "key_dim", typ: TInt, def: "linear_key_head_dim"},
			{key: "value_dim", typ: TInt, def: "linear_value_head_dim"},
			{key: "conv_kernel", typ: TInt, def: "linear_conv_kernel_dim"},
			{key: "norm_eps", typ: TFloat, def: "rms_norm_eps"},
			{key: "projections", words: []string{"grouped", "flat", "separate"}, def: "flat"},
			{key: "allow_neg_eigval", typ: TBool, def: "false"},
			{key: "tiled_heads", typ: TBool, def: "false"},
		},
		resolve: resolveGatedDelta,
	})
}

// GatedDelta is a gated_delta mixer, resolved.
type GatedDelta struct {
	none
	KeyHeads, ValueHeads, KeyDim, ValueDim, Kernel, Eps *Value
	Grouped                                             bool // in_proj_qkvz and in_proj_ba, grouped by key head
	// Separate: q, k, v, g, b and a projections of their own, and q, k
	// and v a convolution each, with a state slot each (OLMo hybrid).
	Separate bool
	// NegEigval: the write strength is 2 sigmoid(b), in [0, 2].
	NegEigval *Value
	// TiledHeads: value head h reads key head h mod key_heads (the order
	// of llama.cpp's GGUF files), not h / (value_heads / key_heads).
	TiledHeads *Value

	name     string
	self     *field // the Layer's *GatedDelta
	heads    *field
	projs    []Proj
	convs    []deltaConv
	normName string
	dtBias   *field
	rate     *field
	norm     *field
	outProj  Proj
}

const rDelta = "d"

func resolveGatedDelta(o *mixerOptions, a *Arch) (mixer, error) {
	d := &GatedDelta{
		KeyHeads: o.value("key_heads"), ValueHeads: o.value("value_heads"),
		KeyDim: o.value("key_dim"), ValueDim: o.value("value_dim"),
		Kernel: o.value("conv_kernel"), Eps: o.value("norm_eps"),
		Grouped:    o.word("projections") == "grouped",
		Separate:   o.word("projections") == "separate",
		NegEigval:  o.value("allow_neg_eigval"),
		TiledHeads: o.value("tiled_heads"),
		name:       "linear_attn",
	}
	d.self = newField(goName(d.name), func() *jen.Statement { return jen.Op("*").Id("GatedDelta") }, d.name)
	d.heads = newField("heads", func() *jen.Statement { return jen.Qual(nnPkg, "DeltaHeads") }, "")
	heads := func(method string) func() *jen.Statement {
		return func() *jen.Statement { return d.heads.of(rDelta).Dot(method).Call() }
	}
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	no := &Value{Text: "false", code: jen.False(), isLit: true, lit: false}
	proj := func(name string, out func() *jen.Statement) Proj {
		return Proj{Field: linear(name), Name: name, Out: out, In: hidden, Bias: no}
	}
	valueHeads := func() *jen.Statement { return d.heads.of(rDelta).Dot("ValueHeads") }
	keyWidth := func() *jen.Statement {
		return d.heads.of(rDelta).Dot("KeyHeads").Op("*").Add(d.heads.of(rDelta).Dot("KeyDim"))
	}
	switch {
	case d.Grouped:
		d.projs = []Proj{
			proj("in_proj_qkvz", func() *jen.Statement { return heads("ConvWidth")().Op("+").Add(heads("ValueWidth")()) }),
			proj("in_proj_ba", func() *jen.Statement { return jen.Lit(2).Op("*").Add(valueHeads()) }),
		}
	case d.Separate:
		d.projs = []Proj{
			proj("q_proj", keyWidth),
			proj("k_proj", keyWidth),
			proj("v_proj", heads("ValueWidth")),
			proj("g_proj", heads("ValueWidth")),
			proj("b_proj", valueHeads),
			proj("a_proj", valueHeads),
		}
		for i, n := range []string{"q_conv1d", "k_conv1d", "v_conv1d"} {
			width := keyWidth
			if i == 2 {
				width = heads("ValueWidth")
			}
			d.convs = append(d.convs, deltaConv{field: newField(goName(n), nnType("ShortConv"), n+": depthwise, causal"), name: n, width: width})
		}
	default:
		d.projs = []Proj{
			proj("in_proj_qkv", heads("ConvWidth")),
			proj("in_proj_z", heads("ValueWidth")),
			proj("in_proj_b", valueHeads),
			proj("in_proj_a", valueHeads),
		}
	}
	if !d.Separate {
		d.convs = []deltaConv{{field: newField("Conv1D", nnType("ShortConv"), "conv1d"), name: "conv1d", width: heads("ConvWidth")}}
	}
	d.dtBias = newField("DtBias", func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }, "dt_bias")
	d.rate = newField("Rate", func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }, "A_log, as -exp(A_log) in float32 (made at load)")
	normName, outName := "norm", "out_proj"
	if d.Separate {
		normName, outName = "o_norm", "o_proj"
	}
	d.normName = normName
	d.norm = newField(goName(normName), nnType("RMSNorm"), normName+": per value head, gated by silu(z)")
	d.outProj = Proj{Field: linear(outName), Name: outName, Out: hidden, In: heads("ValueWidth"), Bias: no}
	return d, nil
}

// deltaConv is one of the mixer's short convolutions: one over q, k and
// v side by side, or one each.
type deltaConv struct {
	field *field
	name  string
	width func() *jen.Statement
}

func (d *GatedDelta) typeName() goType      { return "GatedDelta" }
func (d *GatedDelta) field() *field         { return d.self }
func (d *GatedDelta) recv() string          { return rDelta }
func (d *GatedDelta) typeDoc() string       { return "linear attention by the gated delta rule" }
func (d *GatedDelta) states() int           { return 1 + len(d.convs) }
func (d *GatedDelta) besideAttention() bool { return false }

func (d *GatedDelta) fields(t goType) []jen.Code {
	if t != d.typeName() {
		return nil
	}
	var out []jen.Code
	for _, p := range d.projs {
		out = append(out, p.Field.decl())
	}
	for _, c := range d.convs {
		out = append(out, c.field.decl())
	}
	return append(out, d.dtBias.decl(), d.rate.decl(), d.norm.decl(), d.outProj.Field.decl())
}

func (d *GatedDelta) params(t goType) []jen.Code {
	if t != d.typeName() {
		return nil
	}
	return []jen.Code{d.heads.decl()}
}

func (d *GatedDelta) inits(t goType) []kvPair {
	if t != d.typeName() {
		return nil
	}
	heads := []kvPair{
		{"KeyHeads", d.KeyHeads.Code()},
		{"ValueHeads", d.ValueHeads.Code()},
		{"KeyDim", d.KeyDim.Code()},
		{"ValueDim", d.ValueDim.Code()},
	}
	if !d.NegEigval.IsFalse() {
		heads = append(heads, kvPair{"NegEigval", d.NegEigval.Code()})
	}
	if !d.TiledHeads.IsFalse() {
		heads = append(heads, kvPair{"Tiled", d.TiledHeads.Code()})
	}
	return []kvPair{{d.heads.key(), jen.Qual(nnPkg, "DeltaHeads").Values(fieldsOf(heads)...)}}
}

// build loads its modules, in the branch of the layers it mixes.
func (d *GatedDelta) build(s stage) []jen.Code {
	if s != sLayer {
		return nil
	}
	var out []jen.Code
	for _, p := range d.projs {
		out = append(out, p.load(rDelta, d.name))
	}
	vec := func(f *field, n string) jen.Code {
		return f.of(rDelta).Op("=").Id("lw").Dot("Vector").Call(jen.Lit(d.name+"."+n), d.heads.of(rDelta).Dot("ValueHeads"))
	}
	for _, c := range d.convs {
		out = append(out, c.field.of(rDelta).Op("=").Id("lw").Dot("ShortConv").Call(jen.Lit(d.name+"."+c.name), c.width(), d.Kernel.Code(), jen.False()))
	}
	out = append(out,
		vec(d.dtBias, "dt_bias"),
		d.rate.of(rDelta).Op("=").Id("lw").Dot("DecayRate").Call(jen.Lit(d.name+".A_log"), d.heads.of(rDelta).Dot("ValueHeads")),
		d.norm.of(rDelta).Op("=").Id("lw").Dot("RMSNorm").Call(jen.Lit(d.name+"."+d.normName), d.heads.of(rDelta).Dot("ValueDim"), d.Eps.Code()),
		d.outProj.load(rDelta, d.name),
	)
	return out
}

// emitForward writes GatedDelta.forward:
//
//	func (d *GatedDelta) forward(g, x, mask, c) *mlx.Array {
//		s := nn.StatesOf(g, c, 2)
//		in := nn.GroupedDeltaInputs(g, d.InProjQkvz.Apply(g, x), d.InProjBa.Apply(g, x), d.heads)
//		qkv := d.Conv1D.ApplySiLU(g, s, 0, in.QKV)
//		y := nn.GatedDelta(g, s, 1, qkv, in.B, in.A, d.Rate, d.DtBias, d.heads)
//		return d.OutProj.Apply(g, nn.GatedNorm(g, d.Norm, y, in.Z) as [B, L, value width])
//	}
func (d *GatedDelta) emitForward(f *jen.File) {
	self := func(fl *field) *jen.Statement { return fl.of(rDelta) }
	// The projections of x as one op (nn.Products: each output as its
	// layer's Apply gives it).
	products := []jen.Code{g(), jen.Id("x")}
	index := map[*field]int{}
	for i, p := range d.projs {
		products = append(products, self(p.Field))
		index[p.Field] = i
	}
	applied := func(p Proj) jen.Code { return jen.Id("p").Index(jen.Lit(index[p.Field])) }
	conv := func(i int, in jen.Code) jen.Code {
		return self(d.convs[i].field).Dot("ApplySiLU").Call(g(), jen.Id("s"), jen.Lit(i), in)
	}
	stateSlot := len(d.convs)
	body := []jen.Code{
		jen.List(jen.Id("B"), jen.Id("L")).Op(":=").List(jen.Id("x").Dot("Dim").Call(jen.Lit(0)), jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
		jen.Id("p").Op(":=").Qual(nnPkg, "Products").Call(products...).Comment("the projections, in order"),
	}
	switch {
	case d.Separate:
		body = append(body,
			jen.Id("s").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(d.states())).Comment("slots 0-2: q's, k's and v's convolutions' last inputs; 3: the rule's state"),
			jen.Id("in").Op(":=").Qual(nnPkg, "DeltaInputs").Values(fieldsOf([]kvPair{
				{"QKV", call("Concatenate", jen.Lit(-1), conv(0, applied(d.projs[0])), conv(1, applied(d.projs[1])), conv(2, applied(d.projs[2])))},
				{"Z", call("Reshape", applied(d.projs[3]), jen.Id("B"), jen.Id("L"), self(d.heads).Dot("ValueHeads"), self(d.heads).Dot("ValueDim"))},
				{"B", applied(d.projs[4])},
				{"A", applied(d.projs[5])},
			})...),
			jen.Id("qkv").Op(":=").Id("in").Dot("QKV").Comment("[B, L, q, k and v widths], each through its convolution"),
		)
	case d.Grouped:
		body = append(body,
			jen.Id("s").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(d.states())).Comment("slot 0: the convolution's last inputs; 1: the rule's state"),
			jen.Id("in").Op(":=").Qual(nnPkg, "GroupedDeltaInputs").Call(g(), applied(d.projs[0]), applied(d.projs[1]), self(d.heads)),
			jen.Id("qkv").Op(":=").Add(conv(0, jen.Id("in").Dot("QKV"))).Comment("[B, L, q, k and v widths]"),
		)
	default:
		body = append(body,
			jen.Id("s").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(d.states())).Comment("slot 0: the convolution's last inputs; 1: the rule's state"),
			jen.Id("in").Op(":=").Qual(nnPkg, "FlatDeltaInputs").Call(g(), applied(d.projs[0]), applied(d.projs[1]), applied(d.projs[2]), applied(d.projs[3]), self(d.heads)),
			jen.Id("qkv").Op(":=").Add(conv(0, jen.Id("in").Dot("QKV"))).Comment("[B, L, q, k and v widths]"),
		)
	}
	body = append(body,
		jen.Id("y").Op(":=").Qual(nnPkg, "GatedDelta").Call(g(), jen.Id("s"), jen.Lit(stateSlot), jen.Id("qkv"), jen.Id("in").Dot("B"), jen.Id("in").Dot("A"), self(d.rate), self(d.dtBias), self(d.heads)).Comment("[B, L, value heads, value_dim]"),
		jen.Id("s").Dot("Advance").Call(jen.Id("L")),
		jen.Id("y").Op("=").Qual(nnPkg, "GatedNorm").Call(g(), self(d.norm), jen.Id("y"), jen.Id("in").Dot("Z")),
		jen.Return(apply(self(d.outProj.Field), call("Reshape", jen.Id("y"), jen.Id("B"), jen.Id("L"), self(d.heads).Dot("ValueWidth").Call()))),
	)
	f.Comment(comment("forward is linear attention by the gated delta rule over x [B, L, hidden], reading and updating the layer's state cache (mask is the attention layers'; a recurrent layer runs one sequence a row and reads none)."))
	f.Func().Params(jen.Id(rDelta).Op("*").Id("GatedDelta")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// shard: the rule's heads would split with their convolution channels and
// state; no plan does that yet.
func (d *GatedDelta) shard(p *ShardPlan, a *Arch) {
	p.refuse("its gated_delta layers (%s) have no tensor-parallel plan: their heads, convolution channels and states would split together", d.name)
}
