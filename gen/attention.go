package gen

import (
	"github.com/dave/jennifer/jen"
	"strings"
)

// Attention: grouped-query self-attention with its projections (separate
// or fused qkv), optional q and k norms, its hyperparameters, and the
// layers that attend within a sliding window.

// Proj is one linear layer of a module: its field, checkpoint name
// (relative to the module), its shape and bias.
type Proj struct {
	Field   *field
	Name    string
	Out, In func() *jen.Statement
	Bias    *Value
}

// linear is a projection's field.
func linear(n string) *field { return newField(goName(n), nnType("Linear"), n) }

// load spells recv.Field = lw.Linear(prefix.name, out, in, bias).
func (p Proj) load(recv, prefix string) jen.Code {
	return p.Field.of(recv).Op("=").Id("lw").Dot("Linear").Call(jen.Lit(joinName(prefix, p.Name)), p.Out(), p.In(), p.Bias.Code())
}

// headGateFunc is runtime/nn's function of the head gate's kind.
func (at *Attention) headGateFunc() string {
	if at.headGateSoftplus {
		return "HeadGateSoftplus"
	}
	return "HeadGate"
}

// headGateAct names the head gate's function of its logit.
func (at *Attention) headGateAct() string {
	if at.headGateSoftplus {
		return "softplus"
	}
	return "sigmoid"
}

// Attention is self-attention, resolved.
type Attention struct {
	none
	Field                   *field // the Layer's Attention
	Name                    string // its checkpoint name
	Heads, KVHeads, HeadDim *Value
	Scale                   *Value
	FusedQKV                bool
	FusedPerHead            bool // the fused output is [kv_heads, heads/kv_heads + 2, head_dim]
	Float32                 bool // queries, keys and values attend in float32, the result cast back
	BiasQ, BiasK, BiasV     *Value
	BiasO                   *Value
	QKNorm                  QKNorm
	Projs                   []Proj
	QNorm, KNorm            *field // nil without q and k norms
	qNormName, kNormName    string
	Sliding                 *Sliding // nil: every layer attends fully
	QKNormWhen              *Value   // nil: the q and k norms are always there
	QKNormEps               *Value   // the q and k norms' eps; nil: the norm's
	Float32IfFloat16        bool     // float16 attends in float32, other dtypes as they are
	QueryScale              *QueryScale
	Sinks                   *field // nil: no attention sinks
	OutputGate              bool   // q_proj gives [queries | gate] per head; o reads output * sigmoid(gate)
	// KVTiled: query head h reads key-value head h mod kv_heads.
	KVTiled bool
	// ValuesFromKeys: the layers (a per-layer bool) with no v projection,
	// whose values are k's projection (nil: none such).
	ValuesFromKeys *Value
	VNorm          *field // x / rms(x) over each value head; nil: none
	// headGateSoftplus: the head gate is softplus(logit), not its
	// sigmoid; headGateWhen, where set, says at load whether it is there.
	headGateSoftplus bool
	headGateWhen     *Value
	// HeadGate is the per-head output gate's projection (hidden -> heads);
	// nil: none.
	HeadGate *Proj
	// KVFrom: the layer (a per-layer int) whose keys and values a layer
	// attends over, where it is not the layer itself or -1 (nil: each its
	// own); shares marks those layers.
	KVFrom *Value
	shares *field
	// Absent: no layer attends (a mixer kind claims every layer, Mamba2):
	// attention emits nothing and reads no config key.
	Absent bool

	heads, kvHeads, headDim *field
	scale                   *field
	norm                    *Norm
	rope                    *Rope
	softcap                 *Scalar
	qk                      *qkNormKind // attention_qknorm.go
	attend                  *attendKind // attention_attend.go
	kvConv                  *kvConv     // attention_kv_conv.go; nil: none
}

// link names the attention's fields and projections and ties it to the
// norm, rope and scalars of a.
func (at *Attention) link(a *Arch) {
	n := a.Names
	at.Field, at.Name = newField(goName(n.Attention), func() *jen.Statement { return jen.Id("Attention") }, n.Attention), n.Attention
	if at.Absent {
		return
	}
	at.heads = newField("heads", intType, "")
	at.kvHeads = newField("kvHeads", intType, "")
	at.headDim = newField("headDim", intType, "")
	at.scale = newField("scale", float32Type, at.Scale.Text)
	at.norm, at.rope, at.softcap = a.Norm, a.Rope, a.Scalars.Get(AttnSoftcap)
	if at.QKNormEps != nil {
		n := *a.Norm
		n.Eps = at.QKNormEps
		at.norm = &n
	}
	width := func(h *field) func() *jen.Statement {
		return func() *jen.Statement { return h.of(rAttn).Op("*").Add(at.headDim.of(rAttn)) }
	}
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	o := Proj{Field: linear(n.O), Name: n.O, Out: hidden, In: width(at.heads), Bias: at.BiasO}
	if at.FusedQKV {
		qkv := func() *jen.Statement {
			return jen.Parens(at.heads.of(rAttn).Op("+").Lit(2).Op("*").Add(at.kvHeads.of(rAttn))).Op("*").Add(at.headDim.of(rAttn))
		}
		at.Projs = []Proj{{Field: linear(n.QKV), Name: n.QKV, Out: qkv, In: hidden, Bias: at.BiasQ}, o}
	} else {
		at.Projs = []Proj{
			{Field: linear(n.Q), Name: n.Q, Out: at.queryWidth(width(at.heads)), In: hidden, Bias: at.BiasQ},
			{Field: linear(n.K), Name: n.K, Out: width(at.kvHeads), In: hidden, Bias: at.BiasK},
			{Field: linear(n.V), Name: n.V, Out: width(at.kvHeads), In: hidden, Bias: at.BiasV},
			o,
		}
	}
	at.linkNorms(a)
}

// queryWidth is q's projection's width: twice the queries' with an output
// gate.
func (at *Attention) queryWidth(w func() *jen.Statement) func() *jen.Statement {
	if !at.OutputGate {
		return w
	}
	return func() *jen.Statement { return jen.Lit(2).Op("*").Add(w()) }
}

func (at *Attention) fields(t goType) []jen.Code {
	if at.Absent {
		return nil
	}
	switch t {
	case tLayer:
		return []jen.Code{at.Field.decl()}
	case tAttention:
		var out []jen.Code
		for _, p := range at.Projs {
			out = append(out, p.Field.decl())
		}
		if at.QNorm != nil {
			out = append(out, at.QNorm.decl(), at.KNorm.decl())
		}
		if at.Sinks != nil {
			out = append(out, at.Sinks.decl())
		}
		if at.VNorm != nil {
			out = append(out, at.VNorm.decl())
		}
		if at.HeadGate != nil {
			out = append(out, at.HeadGate.Field.decl())
		}
		if at.kvConv != nil {
			out = append(out, at.kvConv.field.decl())
		}
		return out
	}
	return nil
}

func (at *Attention) params(t goType) []jen.Code {
	if t != tAttention || at.Absent {
		return nil
	}
	out := []jen.Code{at.heads.decl(), at.kvHeads.decl(), at.headDim.decl(), at.scale.decl()}
	if at.shares != nil {
		out = append(out, at.shares.decl())
	}
	return append(out, at.QueryScale.params(t)...)
}

func (at *Attention) inits(t goType) []kvPair {
	if t != tAttention || at.Absent {
		return nil
	}
	return append([]kvPair{
		{at.heads.key(), at.Heads.Code()},
		{at.kvHeads.key(), at.KVHeads.Code()},
		{at.headDim.key(), at.HeadDim.Code()},
		{at.scale.key(), at.Scale.Float32()},
	}, at.QueryScale.inits(t)...)
}

func (at *Attention) build(s stage) []jen.Code {
	switch {
	case at.Absent || at.kvConv == nil && at.KVFrom == nil && s != sLayer:
		return nil
	case s == sAfter && at.KVFrom != nil:
		return []jen.Code{jen.Id("w").Dot("Fail").Call(jen.Qual(nnPkg, "CheckShared").Call(fCaches.of(rModel)))}
	case s == sAfter:
		return []jen.Code{at.kvConv.caches()}
	case s != sLayer:
		return nil
	}
	var out, own []jen.Code // own: the keys' and values' weights, where the layer has them
	for i, p := range at.Projs {
		var load jen.Code = p.load(rAttn, at.Name)
		if at.ValuesFromKeys != nil && i == 2 {
			// no v projection where values are k's: one product, read twice
			load = jen.If(at.ValuesFromKeys.Code()).Block(
				p.Field.of(rAttn).Op("=").Add(at.Projs[1].Field.of(rAttn)),
			).Else().Block(load)
		}
		if at.KVFrom != nil && (i == 1 || i == 2) {
			own = append(own, load)
		} else {
			out = append(out, load)
		}
	}
	norms := at.buildNorms()
	if at.KVFrom != nil && len(norms) == 2 {
		out, own = append(out, norms[0]), append(own, norms[1])
	} else {
		out = append(out, norms...)
	}
	if at.KVFrom != nil {
		spec := fCaches.of(rModel).Index(jen.Id("i"))
		shared := []jen.Code{
			jen.Comment("no keys or values of its own: it attends over layer from's"),
			at.shares.of(rAttn).Op("=").Id(rAttn).Dot("forwardShared"),
			jen.Id("lw").Dot("DropModule").Call(jen.Lit(at.Name + "." + at.Projs[1].Name)).Comment("the weights a checkpoint may hold for them"),
			jen.Id("lw").Dot("DropModule").Call(jen.Lit(at.Name + "." + at.Projs[2].Name)),
			jen.List(spec.Clone().Dot("None"), spec.Clone().Dot("Shares"), spec.Clone().Dot("From")).Op("=").List(jen.True(), jen.True(), jen.Id("from")),
		}
		if at.KNorm != nil {
			shared = append(shared, jen.Id("lw").Dot("DropModule").Call(jen.Lit(at.Name+"."+at.kNormName)))
		}
		own = append([]jen.Code{at.shares.of(rAttn).Op("=").Id(rAttn).Dot("forwardOwn")}, own...)
		out = append(out, jen.If(jen.Id("from").Op(":=").Add(at.KVFrom.Code()), jen.Id("from").Op(">=").Lit(0).Op("&&").Id("from").Op("!=").Id("i")).Block(shared...).Else().Block(own...))
	} else {
		out = append(out, own...)
	}
	if at.VNorm != nil {
		out = append(out, at.VNorm.of(rAttn).Op("=").Qual(nnPkg, "NewPlainRMSNorm").Call(at.norm.Eps.Code(), jen.True()))
	}
	if at.HeadGate != nil {
		load := at.HeadGate.load(rAttn, at.Name)
		if at.headGateWhen != nil && !at.headGateWhen.IsTrue() {
			load = jen.If(at.headGateWhen.Code()).Block(load)
		}
		out = append(out, load)
	}
	if at.kvConv != nil {
		out = append(out, at.kvConv.load(at))
	}
	return append(out, at.loadSinks()...)
}

// MaskArray: attention written out (soft-capped scores) adds an explicit
// mask array to its scores, where MLX's fused attention takes the causal
// mask by name.
func (at *Attention) MaskArray() bool { return at.softcap != nil }

// forward spells the layer's attention on x.
func (at *Attention) forward(x jen.Code) *jen.Statement {
	return at.Field.of(rLayer).Dot("forward").Call(g(), x, jen.Id("mask"), jen.Id("c"))
}

// emitForward writes Attention.forward:
//
//	func (a *Attention) forward(g, x, mask, c) *mlx.Array {
//		q, k, v := projections of x, reshaped to heads and transposed
//		q, k = a.rope.Apply(...)
//		o := kv.Attend(g, q, c.Update(g, k, v), kv.Spec{Scale: a.scale, Mask: mask})
//		return a.OProj.Apply(g, o back to [B, L, heads*head_dim])
//	}
func (at *Attention) emitForward(f *jen.File) {
	if at.Absent {
		return
	}
	self := func(fl *field) *jen.Statement { return fl.of(rAttn) }
	width := func(h *field) *jen.Statement { return self(h).Op("*").Add(self(at.headDim)) }
	body := []jen.Code{
		jen.List(jen.Id("B"), jen.Id("L")).Op(":=").List(jen.Id("x").Dot("Dim").Call(jen.Lit(0)), jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
	}
	var qkNorm []jen.Code
	if at.QNorm != nil {
		qkNorm = []jen.Code{
			jen.Id("q").Op("=").Add(apply(self(at.QNorm), jen.Id("q"))),
			jen.Id("k").Op("=").Add(apply(self(at.KNorm), jen.Id("k"))),
		}
	}
	perHead := at.qk.place == qkPerHead
	if !at.FusedQKV && !at.qk.headLayout && !at.OutputGate {
		// Separate projections straight into heads, [B, heads, L, head_dim]
		// (the norms that span every head, or weigh each head on its own,
		// read [B, L, heads*head_dim] or [B, L, heads, head_dim] first).
		body = append(body,
			jen.Id("qkv").Op(":=").Qual(nnPkg, "ProductsByHead").Call(g(), jen.Id("x"), self(at.headDim), self(at.Projs[0].Field), self(at.Projs[1].Field), self(at.Projs[2].Field)),
			jen.List(jen.Id("q"), jen.Id("k"), jen.Id("v")).Op(":=").List(jen.Id("qkv").Index(jen.Lit(0)), jen.Id("qkv").Index(jen.Lit(1)), jen.Id("qkv").Index(jen.Lit(2))).
				Comment("[B, heads, L, head_dim], [B, kv_heads, L, head_dim] twice"),
		)
		if perHead {
			body = append(body, qkNorm...)
		}
	} else {
		if at.FusedPerHead {
			groups := func() *jen.Statement { return jen.Parens(self(at.heads).Op("/").Add(self(at.kvHeads))) }
			body = append(body,
				jen.Id("qkv").Op(":=").Add(call("SplitAt",
					call("Reshape", apply(self(at.Projs[0].Field), jen.Id("x")), jen.Id("B"), jen.Id("L"), self(at.kvHeads), groups().Op("+").Lit(2), self(at.headDim)),
					jen.Index().Int().Values(groups(), groups().Op("+").Lit(1)), jen.Lit(-2))),
				jen.List(jen.Id("q"), jen.Id("k"), jen.Id("v")).Op(":=").List(jen.Id("qkv").Index(jen.Lit(0)), jen.Id("qkv").Index(jen.Lit(1)), jen.Id("qkv").Index(jen.Lit(2))).
					Comment("[B, L, kv_heads, heads/kv_heads (1, 1), head_dim]: each key-value head's queries, key and value side by side"),
			)
		} else if at.FusedQKV {
			body = append(body,
				jen.Id("qkv").Op(":=").Add(call("SplitAt", apply(self(at.Projs[0].Field), jen.Id("x")),
					jen.Index().Int().Values(width(at.heads), jen.Parens(self(at.heads).Op("+").Add(self(at.kvHeads))).Op("*").Add(self(at.headDim))), jen.Lit(-1))),
				jen.List(jen.Id("q"), jen.Id("k"), jen.Id("v")).Op(":=").List(jen.Id("qkv").Index(jen.Lit(0)), jen.Id("qkv").Index(jen.Lit(1)), jen.Id("qkv").Index(jen.Lit(2))).
					Comment("[B, L, heads*head_dim], [B, L, kv_heads*head_dim] twice"),
			)
		} else {
			body = append(body,
				jen.Id("qkv").Op(":=").Qual(nnPkg, "Products").Call(g(), jen.Id("x"), self(at.Projs[0].Field), self(at.Projs[1].Field), self(at.Projs[2].Field)),
				jen.List(jen.Id("q"), jen.Id("k"), jen.Id("v")).Op(":=").List(jen.Id("qkv").Index(jen.Lit(0)), jen.Id("qkv").Index(jen.Lit(1)), jen.Id("qkv").Index(jen.Lit(2))).
					Comment("[B, L, heads*head_dim], [B, L, kv_heads*head_dim] twice"),
			)
		}
		if at.qk.place == qkWide {
			body = append(body, qkNorm...)
		}
		if at.OutputGate {
			body = append(body,
				jen.Id("qg").Op(":=").Add(call("Split", call("Reshape", jen.Id("q"), jen.Id("B"), jen.Id("L"), self(at.heads), jen.Lit(2).Op("*").Add(self(at.headDim))), jen.Lit(2), jen.Lit(-1))).Comment("each head's queries, then its gate"),
				jen.Id("gate").Op(":=").Add(call("Reshape", jen.Id("qg").Index(jen.Lit(1)), jen.Id("B"), jen.Id("L"), width(at.heads))).Comment("[B, L, heads*head_dim]"),
				jen.Id("q").Op("=").Id("qg").Index(jen.Lit(0)).Comment("[B, L, heads, head_dim]"),
			)
		} else {
			body = append(body, jen.Id("q").Op("=").Add(call("Reshape", jen.Id("q"), jen.Id("B"), jen.Id("L"), self(at.heads), self(at.headDim))).Comment("[B, L, heads, head_dim]"))
		}
		body = append(body,
			jen.Id("k").Op("=").Add(call("Reshape", jen.Id("k"), jen.Id("B"), jen.Id("L"), self(at.kvHeads), self(at.headDim))).Comment("[B, L, kv_heads, head_dim]"),
			jen.Id("v").Op("=").Add(call("Reshape", jen.Id("v"), jen.Id("B"), jen.Id("L"), self(at.kvHeads), self(at.headDim))).Comment("[B, L, kv_heads, head_dim]"),
		)
		if perHead {
			body = append(body, qkNorm...)
		}
		body = append(body,
			jen.Id("q").Op("=").Add(call("Transpose", jen.Id("q"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3))).Comment("[B, heads, L, head_dim]"),
			jen.Id("k").Op("=").Add(call("Transpose", jen.Id("k"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3))).Comment("[B, kv_heads, L, head_dim]"),
			jen.Id("v").Op("=").Add(call("Transpose", jen.Id("v"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3))).Comment("[B, kv_heads, L, head_dim]"),
		)
	}
	doc := "forward is grouped-query self-attention over x [B, L, hidden]" + at.rope.doc() + at.attend.doc
	if at.VNorm != nil {
		body = append(body, jen.Id("v").Op("=").Add(apply(self(at.VNorm), jen.Id("v"))).Comment("each value head over its rms"))
		doc += ", each value head divided by its rms"
	}
	if at.ValuesFromKeys != nil {
		doc += "; where " + at.ValuesFromKeys.Text + ", the values are k's projection (v_proj is k_proj)"
	}
	if at.kvConv != nil {
		body = append(body, at.kvConv.forward())
		doc += ", its keys and values convolved over time"
	}
	body = append(body, at.rope.forward()...)
	body = append(body, at.QueryScale.forward()...)
	if at.qk.place == qkAfterRope {
		body = append(body, qkNorm...)
	}
	if at.KVTiled {
		body = append(body, jen.Id("q").Op("=").Qual(nnPkg, "GroupTiledHeads").Call(g(), jen.Id("q"), self(at.kvHeads)).Comment("query heads in the order that groups each key-value head's readers"))
		doc += ", its key-value heads tiled across the query heads (head h reads h mod kv_heads)"
	}
	update := jen.Id("c").Dot("Update").Call(g(), jen.Id("k"), jen.Id("v"))
	body = append(body, jen.Id("o").Op(":=").Add(at.attend.call(at, update)).Comment("[B, heads, L, head_dim]"))
	if at.KVTiled {
		body = append(body, jen.Id("o").Op("=").Qual(nnPkg, "UngroupTiledHeads").Call(g(), jen.Id("o"), self(at.kvHeads)).Comment("back in the query heads' own order"))
	}
	if at.HeadGate != nil {
		body = append(body,
			jen.Id("o").Op("=").Add(call("Transpose", jen.Id("o"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3))).Comment("[B, L, heads, head_dim]"),
			jen.Id("o").Op("=").Qual(nnPkg, at.headGateFunc()).Call(g(), jen.Id("o"), self(at.HeadGate.Field), jen.Id("x")).Comment("each head times "+at.headGateAct()+" of its gate logit"),
			jen.Id("o").Op("=").Add(call("Reshape", jen.Id("o"), jen.Id("B"), jen.Id("L"), width(at.heads))).Comment("[B, L, heads*head_dim]"),
		)
		doc += ", each head's output gated by the " + at.headGateAct() + " of " + at.HeadGate.Name + "(x)"
	} else {
		body = append(body,
			jen.Id("o").Op("=").Add(call("Reshape", call("Transpose", jen.Id("o"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3)), jen.Id("B"), jen.Id("L"), width(at.heads))).Comment("[B, L, heads*head_dim]"),
		)
	}
	if at.OutputGate {
		body = append(body, jen.Id("o").Op("=").Add(call("Multiply", jen.Id("o"), call("Sigmoid", jen.Id("gate")))))
		doc += ", its output gated by sigmoid(gate) from q's projection"
	}
	body = append(body, jen.Return(apply(self(at.Projs[len(at.Projs)-1].Field), jen.Id("o"))))
	method := "forward"
	if at.KVFrom != nil {
		method = "forwardOwn"
		doc = strings.Replace(doc, "forward is", "forwardOwn is", 1) + "; the attention of a layer with keys and values of its own"
		f.Comment(comment("forward is the layer's attention as build chose it: over its own keys and values (forwardOwn), or over an earlier layer's (forwardShared, where " + at.KVFrom.Text + " names another layer)."))
		f.Func().Params(jen.Id(rAttn).Op("*").Id("Attention")).Id("forward").Params(
			graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
		).Add(arrayType()).Block(jen.Return(self(at.shares).Call(g(), jen.Id("x"), jen.Id("mask"), jen.Id("c"))))
		f.Line()
	}
	f.Comment(comment(doc + "."))
	f.Func().Params(jen.Id(rAttn).Op("*").Id("Attention")).Id(method).Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
	if at.KVFrom != nil {
		at.emitForwardShared(f)
	}
}

// emitForwardShared writes Attention.forwardShared, the attention of a
// layer that computes only queries and attends over the keys and values
// an earlier layer stored this step (its cache is a kv.Reader of that
// layer's):
//
//	func (a *Attention) forwardShared(g, x, mask, c) *mlx.Array {
//		q := q's projection of x by heads, normed, rotated from c.Offset()
//		o := kv.Attend(g, q, c.Update(g, nil, nil), kv.Spec{...})
//		return a.OProj.Apply(g, o back to [B, L, heads*head_dim])
//	}
func (at *Attention) emitForwardShared(f *jen.File) {
	self := func(fl *field) *jen.Statement { return fl.of(rAttn) }
	body := []jen.Code{
		jen.List(jen.Id("B"), jen.Id("L")).Op(":=").List(jen.Id("x").Dot("Dim").Call(jen.Lit(0)), jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
		jen.Id("q").Op(":=").Qual(nnPkg, "ProductsByHead").Call(g(), jen.Id("x"), self(at.headDim), self(at.Projs[0].Field)).Index(jen.Lit(0)).Comment("[B, heads, L, head_dim]"),
	}
	if at.QNorm != nil {
		body = append(body, jen.Id("q").Op("=").Add(apply(self(at.QNorm), jen.Id("q"))))
	}
	if at.rope.Rotates() {
		body = append(body, jen.Id("q").Op("=").Add(at.rope.field.of(rAttn)).Dot("Apply").Call(g(), jen.Id("q"), jen.Id("c").Dot("Offset").Call()).Comment("from the position the owner's keys started at"))
	}
	body = append(body,
		jen.Id("o").Op(":=").Add(at.attend.call(at, jen.Id("c").Dot("Update").Call(g(), jen.Nil(), jen.Nil()))).Comment("over the owner's keys and values"),
		jen.Id("o").Op("=").Add(call("Reshape", call("Transpose", jen.Id("o"), jen.Lit(0), jen.Lit(2), jen.Lit(1), jen.Lit(3)), jen.Id("B"), jen.Id("L"), self(at.heads).Op("*").Add(self(at.headDim)))).Comment("[B, L, heads*head_dim]"),
		jen.Return(apply(self(at.Projs[len(at.Projs)-1].Field), jen.Id("o"))),
	)
	f.Comment(comment("forwardShared is the attention of a layer with no keys or values of its own: its queries attend over those an earlier layer stored this step (c reads that layer's cache)."))
	f.Func().Params(jen.Id(rAttn).Op("*").Id("Attention")).Id("forwardShared").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// Sliding says which layers attend within a window. The forward pass
// makes two masks once, from the first full layer's cache and the first
// sliding layer's, and each layer reads its own from a table build makes.
type Sliding struct {
	none
	Layers *Value // per-layer bool
	Window *Value

	window, fullLayer, slidingLayer, mask *field
	stack                                 *field
	count                                 *Value
	softcap                               bool
	// beside: other token mixers take some layers (structure.mixers), so
	// the attention layers' branch of build marks the sliding ones and
	// finds the first layer of each kind, either of which may be none.
	beside bool
}

func newSliding(layers, window *Value) *Sliding {
	if layers == nil {
		return nil
	}
	return &Sliding{
		Layers:       layers,
		Window:       window,
		window:       newField("window", intType, window.Text),
		fullLayer:    newField("fullLayer", intType, "the layer whose cache makes the full-attention mask"),
		slidingLayer: newField("slidingLayer", intType, "the layer whose cache makes the sliding-window mask"),
		mask:         newField("mask", intType, "the mask it attends with: 0 full, 1 sliding window"),
	}
}

func (s *Sliding) params(t goType) []jen.Code {
	switch t {
	case tModel:
		return []jen.Code{s.window.decl(), s.fullLayer.decl(), s.slidingLayer.decl()}
	case tLayer:
		return []jen.Code{s.mask.decl()}
	}
	return nil
}

func (s *Sliding) inits(t goType) []kvPair {
	if t != tModel {
		return nil
	}
	out := []kvPair{{s.window.key(), s.Window.Code()}}
	if s.beside {
		out = append(out, kvPair{s.fullLayer.key(), jen.Lit(-1)}, kvPair{s.slidingLayer.key(), jen.Lit(-1)})
	}
	return out
}

// attentionLayer is what build does in an attention layer's branch when
// other token mixers take the rest (beside):
//
//	if <sliding> {
//		l.mask = 1
//		m.caches[i].Window = m.window
//		m.slidingLayer = nn.FirstLayer(m.slidingLayer, i)
//	} else {
//		m.fullLayer = nn.FirstLayer(m.fullLayer, i)
//	}
func (s *Sliding) attentionLayer() jen.Code {
	first := func(f *field) jen.Code {
		return f.of(rModel).Op("=").Qual(nnPkg, "FirstLayer").Call(f.of(rModel), jen.Id("i"))
	}
	slide := []jen.Code{
		s.mask.of(rLayer).Op("=").Lit(1),
		fCaches.of(rModel).Index(jen.Id("i")).Dot("Window").Op("=").Add(s.window.of(rModel)),
		first(s.slidingLayer),
	}
	if s.Layers.IsTrue() {
		return jen.Add(slide[0]).Line().Add(slide[1]).Line().Add(slide[2]) // every attention layer slides
	}
	return jen.If(s.Layers.Code()).Block(slide...).Else().Block(first(s.fullLayer))
}

func (s *Sliding) build(st stage) []jen.Code {
	if s.beside {
		return nil // in the attention layers' branch (attentionLayer)
	}
	switch st {
	case sBefore:
		return []jen.Code{jen.Id("sliding").Op(":=").Make(jen.Index().Bool(), s.count.Code())}
	case sLayer:
		return []jen.Code{
			jen.Id("sliding").Index(jen.Id("i")).Op("=").Add(s.Layers.Code()),
			jen.If(jen.Id("sliding").Index(jen.Id("i"))).Block(
				s.mask.of(rLayer).Op("=").Lit(1),
				fCaches.of(rModel).Index(jen.Id("i")).Dot("Window").Op("=").Add(s.window.of(rModel)),
			),
		}
	case sAfter:
		return []jen.Code{
			jen.Var().Err().Error(),
			jen.List(s.fullLayer.of(rModel), s.slidingLayer.of(rModel), jen.Err()).Op("=").Qual(nnPkg, "MaskLayers").Call(jen.Id("sliding")),
			jen.Id("w").Dot("Fail").Call(jen.Err()),
		}
	}
	return nil
}

// masks are the lines of Hidden that make the masks, and the mask layer i
// reads.
func (s *Sliding) masks(maskArray bool) ([]jen.Code, jen.Code) {
	stack := s.stack.of(rModel)
	if s.beside {
		// either kind of attention layer may be missing: no mask for it
		return []jen.Code{
			jen.Comment("The masks of the full-attention layers and of the sliding ones, made"),
			jen.Comment("once from the first cache of each kind (none where no layer is of it)."),
			jen.Id("masks").Op(":=").Index(jen.Lit(2)).Qual(mlxPkg, "AttentionMask").Values(
				jen.Line().Qual(nnPkg, "LayerWindowMask").Call(g(), jen.Id("caches"), s.fullLayer.of(rModel), jen.Id("L"), jen.Lit(0), jen.Lit(maskArray)),
				jen.Line().Qual(nnPkg, "LayerWindowMask").Call(g(), jen.Id("caches"), s.slidingLayer.of(rModel), jen.Id("L"), s.window.of(rModel), jen.Lit(maskArray)),
				jen.Line(),
			),
		}, jen.Id("masks").Index(stack.Index(jen.Id("i")).Dot(s.mask.name))
	}
	return []jen.Code{
		jen.Comment("The masks of the full-attention layers and of the sliding ones, made"),
		jen.Comment("once from the first cache of each kind."),
		jen.Id("masks").Op(":=").Index(jen.Lit(2)).Qual(mlxPkg, "AttentionMask").Values(
			jen.Line().Id("caches").Index(s.fullLayer.of(rModel)).Dot("Mask").Call(g(), jen.Id("L"), jen.Lit(0), jen.Lit(maskArray)),
			jen.Line().Id("caches").Index(s.slidingLayer.of(rModel)).Dot("Mask").Call(g(), jen.Id("L"), s.window.of(rModel), jen.Lit(maskArray)),
			jen.Line(),
		),
	}, jen.Id("masks").Index(stack.Index(jen.Id("i")).Dot(s.mask.name))
}

// shard splits attention by heads: q, k and v (all-to-sharded) give each
// process its heads, o (sharded-to-all) sums their outputs; the head and
// KV head counts are divided.
func (at *Attention) shard(p *ShardPlan, a *Arch) {
	if at.Absent {
		return
	}
	switch {
	case at.FusedQKV:
		p.refuse("its fused %s.%s holds q, k and v parts of unequal sizes (%s heads of queries, %s of keys and of values), which a plan's equal parts cannot split",
			at.Name, at.Projs[0].Name, at.Heads.Text, at.KVHeads.Text)
		return
	case at.qk.unsplit != "":
		p.refuse(at.qk.unsplit, at.Name+"."+at.qNormName, at.Name+"."+at.kNormName)
		return
	}
	p.count(a, at.Heads, "structure.attention.heads")
	p.count(a, at.KVHeads, "structure.attention.kv_heads")
	last := len(at.Projs) - 1
	for _, pr := range at.Projs[:last] {
		p.tag(at.Name, pr, AllToSharded, 1)
	}
	p.tag(at.Name, at.Projs[last], ShardedToAll, 1)
	if at.Sinks != nil {
		p.tag(at.Name, Proj{Name: "sinks"}, AllToSharded, 1) // a logit per head: each process its heads'
	}
	if at.HeadGate != nil {
		p.tag(at.Name, *at.HeadGate, AllToSharded, 1) // a gate logit per head: each process its heads'
	}
}

// resolveAttention resolves structure.attention: heads, head_dim, scale,
// the projections' biases, the q and k norms (attention_qknorm.go), the
// attend variant (attention_attend.go), position-scaled queries
// (query_scale.go) and the sliding layers.
func (b *builder) resolveAttention(sc *scope) error {
	at := &b.d.Structure.Attention
	if b.attentionAbsent() {
		b.a.Attn = &Attention{Absent: true}
		return nil
	}
	l := b.leaves(sc)
	b.a.Attn = &Attention{
		Heads:        l.mustLayer(at.Heads, "structure.attention.heads", TInt),
		KVHeads:      l.mustLayer(at.KVHeads, "structure.attention.kv_heads", TInt),
		HeadDim:      l.mustLayer(at.HeadDim, "structure.attention.head_dim", TInt),
		Scale:        l.mustLayer(at.Scale, "structure.attention.scale", TFloat),
		FusedQKV:     at.FusedQKV.V,
		FusedPerHead: at.FusedQKVPerHead.V,
		BiasQ:        l.must(at.Bias.Q, "structure.attention.bias.q", TBool),
		BiasK:        l.must(at.Bias.K, "structure.attention.bias.k", TBool),
		BiasV:        l.must(at.Bias.V, "structure.attention.bias.v", TBool),
		BiasO:        l.must(at.Bias.O, "structure.attention.bias.o", TBool),
		QKNorm:       at.QKNorm.V,

		OutputGate: at.OutputGate.V,
	}
	if l.err != nil {
		return l.err
	}
	if err := b.resolveQKNorm(sc); err != nil {
		return err
	}
	sliding := l.perLayer(at.Sliding, "structure.attention.sliding")
	window := l.opt(at.Window, "structure.attention.window", TInt)
	if l.err != nil {
		return l.err
	}
	a := b.a
	if a.Attn.FusedQKV && !(a.Attn.BiasQ.Text == a.Attn.BiasK.Text && a.Attn.BiasQ.Text == a.Attn.BiasV.Text) {
		return errAt(at.FusedQKV.Pos, "structure.attention.fused_qkv", "a fused qkv projection has one bias for q, k and v: their bias expressions must be the same")
	}
	if a.Attn.FusedPerHead && !a.Attn.FusedQKV {
		return errAt(at.FusedQKVPerHead.Pos, "structure.attention.fused_qkv_per_head", "lays out a fused qkv projection by head: it needs fused_qkv")
	}
	if a.Attn.OutputGate && a.Attn.FusedQKV {
		return errAt(at.OutputGate.Pos, "structure.attention.output_gate", "an output gate comes from q's own projection, not a fused qkv")
	}
	if err := b.resolveAttend(); err != nil {
		return err
	}
	if err := b.resolveValues(sc); err != nil {
		return err
	}
	if (sliding == nil) != (window == nil) {
		return errAt(at.Sliding.Pos, "structure.attention", "sliding and window go together")
	}
	a.Attn.Sliding = newSliding(sliding, window)
	if err := b.resolveKVConv(sc); err != nil {
		return err
	}
	return b.resolveQueryScale(sc)
}

// resolveValues resolves values_from_keys and v_norm.
func (b *builder) resolveValues(sc *scope) error {
	at, a := &b.d.Structure.Attention, b.a.Attn
	l := b.leaves(sc)
	a.ValuesFromKeys = l.perLayer(at.ValuesFromKeys, "structure.attention.values_from_keys")
	if l.err != nil {
		return l.err
	}
	if a.ValuesFromKeys != nil && a.FusedQKV {
		return errAt(at.ValuesFromKeys.Pos, "structure.attention.values_from_keys", "values taken from k's projection need separate projections, not a fused qkv")
	}
	if hg := at.HeadGate; hg.Name.IsSet() && strings.TrimSpace(hg.Name.V) != "" {
		name := strings.TrimSpace(hg.Name.V)
		bias := l.must(hg.Bias, "structure.attention.head_gate.bias", TBool)
		if l.err != nil {
			return l.err
		}
		if a.OutputGate {
			return errAt(hg.Name.Pos, "structure.attention.head_gate", "attention has one output gate: output_gate or head_gate, not both")
		}
		a.HeadGate = &Proj{Field: linear(name), Name: name, Out: func() *jen.Statement { return a.heads.of(rAttn) },
			In: func() *jen.Statement { return fHidden.of(rModel) }, Bias: bias}
		switch strings.TrimSpace(hg.Act.V) {
		case "", "sigmoid":
		case "softplus":
			a.headGateSoftplus = true
		default:
			return errAt(hg.Act.Pos, "structure.attention.head_gate.act", "unknown %q (want sigmoid or softplus)", hg.Act.V)
		}
		if hg.When.IsSet() {
			if a.headGateWhen = l.must(hg.When, "structure.attention.head_gate.when", TBool); l.err != nil {
				return l.err
			}
		}
	}
	if at.KVFrom.IsSet() {
		a.KVFrom = l.mustLayer(at.KVFrom, "structure.attention.kv_from", TInt)
		if l.err != nil {
			return l.err
		}
		why := ""
		switch {
		case a.FusedQKV:
			why = "a fused qkv projection"
		case a.qk.place != qkNowhere && (a.qk.place != qkPerHead || a.qk.headLayout || a.QKNormWhen != nil || a.qk.module != nil):
			why = "q and k norms other than per_head"
		case a.OutputGate:
			why = "an output gate"
		case at.KVConv.IsSet():
			why = "keys and values convolved over time"
		case at.QueryScale.Beta.IsSet():
			why = "position-scaled queries"
		case a.HeadGate != nil:
			why = "a head gate"
		}
		if why != "" {
			return errAt(at.KVFrom.Pos, "structure.attention.kv_from", "layers that read another layer's keys and values go with separate q, k and v projections and per_head norms, not %s", why)
		}
		a.shares = newField("run", func() *jen.Statement { return jen.Qual(nnPkg, "Mixer") }, "forwardOwn, or forwardShared where the layer attends over an earlier layer's keys and values (kv_from)")
	}
	if at.KVTiled.V {
		switch {
		case a.KVFrom != nil:
			return errAt(at.KVTiled.Pos, "structure.attention.kv_tiled", "layers that read another layer's keys and values take them grouped, not tiled")
		case at.Sinks.V:
			return errAt(at.KVTiled.Pos, "structure.attention.kv_tiled", "attention sinks, one per head, go with grouped key-value heads, not tiled")
		}
		a.KVTiled = true
	}
	switch v := strings.TrimSpace(at.VNorm.V); {
	case !at.VNorm.IsSet() || v == "":
	case v == "unweighted":
		a.VNorm = newField("VNorm", nnType("PlainRMSNorm"), "x / rms(x) over each value head, no weight")
	default:
		return errAt(at.VNorm.Pos, "structure.attention.v_norm", "unknown value norm %q (want unweighted, or none)", v)
	}
	return nil
}

// attentionAbsent: a mixer kind claims every layer (its layers are the
// literal true) without attending beside it, so no layer attends.
func (b *builder) attentionAbsent() bool {
	for _, e := range b.d.Structure.Mixers.Entries {
		every, beside := false, false
		for _, o := range e.Val.Entries {
			switch {
			case o.Key == "layers" && strings.TrimSpace(o.Val.V.Text) == "true":
				every = true
			case o.Key == "with_attention" && strings.TrimSpace(o.Val.V.Text) == "true":
				beside = true
			}
		}
		if every && !beside {
			return true
		}
	}
	return false
}

// attentionDefaults: the config's head counts and head_dim, scaled by
// head_dim ** -0.5, no biases, no q and k norms.
func attentionDefaults(d *Descriptor) {
	a, f := &d.Structure.Attention, d.file
	exprDefault(&a.Heads, "num_attention_heads", f)
	exprDefault(&a.KVHeads, "num_key_value_heads", f)
	exprDefault(&a.HeadDim, "head_dim", f)
	exprDefault(&a.Scale, "head_dim ** -0.5", f)
	setDefault(&a.FusedQKV, false, f)
	setDefault(&a.FusedQKVPerHead, false, f)
	setDefault(&a.Float32, false, f)
	for _, b := range []*F[Expr]{&a.Bias.Q, &a.Bias.K, &a.Bias.V, &a.Bias.O, &a.HeadGate.Bias} {
		exprDefault(b, "false", f)
	}
	setDefault(&a.QKNorm, QKNorm("none"), f)
}

// attentionRoles are attention's checkpoint names.
var attentionRoles = []nameRole{
	{"attention", "self_attn", func(n *Names) *F[string] { return &n.Attention }, func(r *ResolvedNames) *string { return &r.Attention }},
	{"q", "q_proj", func(n *Names) *F[string] { return &n.Q }, func(r *ResolvedNames) *string { return &r.Q }},
	{"k", "k_proj", func(n *Names) *F[string] { return &n.K }, func(r *ResolvedNames) *string { return &r.K }},
	{"v", "v_proj", func(n *Names) *F[string] { return &n.V }, func(r *ResolvedNames) *string { return &r.V }},
	{"o", "o_proj", func(n *Names) *F[string] { return &n.O }, func(r *ResolvedNames) *string { return &r.O }},
	{"qkv", "qkv_proj", func(n *Names) *F[string] { return &n.QKV }, func(r *ResolvedNames) *string { return &r.QKV }},
	{"q_norm", "q_norm", func(n *Names) *F[string] { return &n.QNorm }, func(r *ResolvedNames) *string { return &r.QNorm }},
	{"k_norm", "k_norm", func(n *Names) *F[string] { return &n.KNorm }, func(r *ResolvedNames) *string { return &r.KNorm }},
}
