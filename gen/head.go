package gen

import "github.com/dave/jennifer/jen"

// The head: the final norm and the output projection (the embedding table
// itself when tied), then optionally divided and soft-capped.

// Head is the output head, resolved.
type Head struct {
	none
	Tied *Value
	// WhenMissing: tied exactly when the checkpoint holds no head weight.
	WhenMissing bool
	Bias        *Value // the untied head's bias
	Norm        *field // Model's final norm
	NormPath    string
	LMHead      *field
	Name        string // lm_head's checkpoint name

	norm    *Norm
	embed   *Embed
	vocab   *Value
	divide  *Scalar
	softcap *Scalar
	scale   *Scalar
	input   *Scalar // the hidden states' divisor, before the head
	// encoder: no token head; a final norm only where it says
	// (encoder.go).
	encoder *Encoder
}

// hasNorm: the model ends in a final norm.
func (h *Head) hasNorm() bool { return h.encoder == nil || h.encoder.FinalNorm }

func (h *Head) link(a *Arch) {
	h.NormPath = a.path(a.Names.Norm)
	h.Norm = a.Norm.field(goName(a.Names.Norm), h.NormPath)
	h.Name = a.Names.LMHead
	h.LMHead = newField(goName(h.Name), nnType("Linear"), h.Name+"; the embedding table itself when the head is tied")
	h.norm, h.embed, h.vocab = a.FinalNorm, a.Embed, a.Vocab
	h.divide, h.softcap, h.scale = a.Scalars.Get(LogitsDivisor), a.Scalars.Get(FinalSoftcap), a.Scalars.Get(LogitsScale)
	h.input = a.Scalars.Get(InputDivisor)
	h.encoder = a.Encoder
}

func (h *Head) fields(t goType) []jen.Code {
	if t != tModel {
		return nil
	}
	var out []jen.Code
	if h.hasNorm() {
		out = append(out, h.Norm.decl())
	}
	if h.encoder == nil {
		out = append(out, h.LMHead.decl())
	}
	return out
}

func (h *Head) build(s stage) []jen.Code {
	if s != sAfter {
		return nil
	}
	tied := h.LMHead.of(rModel).Op("=").Add(h.embed.Field.of(rModel)).Dot("AsLinear").Call()
	untied := h.LMHead.of(rModel).Op("=").Id("w").Dot("Linear").Call(jen.Lit(h.Name), h.vocab.Code(), fHidden.of(rModel), h.Bias.Code())
	var out []jen.Code
	if h.hasNorm() {
		out = append(out, h.Norm.of(rModel).Op("=").Add(h.norm.loadAt("w", h.NormPath, fHidden.of(rModel), offsetFinal)))
	}
	switch {
	case h.encoder != nil:
	case h.WhenMissing:
		out = append(out, jen.If(jen.Id("w").Dot("Holds").Call(jen.Lit(h.Name+".weight"))).Block(untied).Else().Block(tied))
	case h.Tied.IsTrue():
		out = append(out, tied)
	case h.Tied.IsFalse():
		out = append(out, untied)
	default:
		out = append(out, jen.If(h.Tied.Code()).Block(tied).Else().Block(untied))
	}
	return out
}

// normForward is Hidden's last line: the final norm of h.
func (h *Head) normForward() jen.Code {
	return jen.Id("h").Op("=").Add(apply(h.Norm.of(rModel), jen.Id("h")))
}

// forward are Forward's lines after Hidden: logits from the normed h (first
// divided, where the head divides its input), then the scale, divisor and
// soft cap the head applies to them.
func (h *Head) forward() []jen.Code {
	var out []jen.Code
	if h.input != nil {
		out = append(out, jen.Id("h").Op("=").Add(call("DivideScalar", jen.Id("h"), h.input.of(rModel))).Comment(inline("/ "+h.input.Value.Text)))
	}
	out = append(out, jen.Id("logits").Op(":=").Add(apply(h.LMHead.of(rModel), jen.Id("h"))).Comment("[B, L, vocab]"))
	if h.scale != nil {
		out = append(out, jen.Id("logits").Op("=").Add(call("MultiplyScalar", jen.Id("logits"), h.scale.of(rModel))).Comment(inline("* "+h.scale.Value.Text)))
	}
	if h.divide != nil {
		out = append(out, jen.Id("logits").Op("=").Add(call("DivideScalar", jen.Id("logits"), h.divide.of(rModel))).Comment(inline("/ "+h.divide.Value.Text)))
	}
	if h.softcap != nil {
		out = append(out, jen.Id("logits").Op("=").Qual(nnPkg, "Softcap").Call(g(), jen.Id("logits"), h.softcap.of(rModel)).Comment("tanh(logits / c) * c"))
	}
	return out
}

// resolveHead resolves structure.head: tied (or tied when the checkpoint
// has no head weight) and the untied head's bias.
func (b *builder) resolveHead(sc *scope) error {
	s := &b.d.Structure.Head
	l := b.leaves(sc)
	h := &Head{Tied: l.must(s.Tied, "structure.head.tied", TBool), WhenMissing: s.TiedWhenMissing.V,
		Bias: l.must(s.Bias, "structure.head.bias", TBool)}
	switch {
	case l.err != nil:
		return l.err
	case h.WhenMissing && !h.Tied.IsFalse():
		return errAt(s.TiedWhenMissing.Pos, "structure.head.tied_when_missing", "the checkpoint decides whether the head is tied; structure.head.tied (%s) cannot too", s.Tied.V.Text)
	case !h.Bias.IsFalse() && h.Tied.IsTrue():
		return errAt(s.Bias.Pos, "structure.head.bias", "a tied head is the embedding table, which has no bias")
	}
	b.a.Head = h
	return nil
}

// headDefaults: an untied head without a bias.
func headDefaults(d *Descriptor) {
	exprDefault(&d.Structure.Head.Tied, "false", d.file)
	exprDefault(&d.Structure.Head.Bias, "false", d.file)
}
