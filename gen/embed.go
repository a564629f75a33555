package gen

import "github.com/dave/jennifer/jen"

// The embedding: token ids to the residual stream, optionally scaled.

// Embed is the token embedding, resolved.
type Embed struct {
	none
	Field *field // Model's embedding table
	Path  string // its checkpoint name
	vocab *Value
	scale *Scalar
}

func (e *Embed) link(a *Arch) {
	e.Path = a.path(a.Names.Embed)
	e.Field = newField(goName(a.Names.Embed), nnType("Embedding"), e.Path)
	e.vocab, e.scale = a.Vocab, a.Scalars.Get(EmbedScale)
}

func (e *Embed) fields(t goType) []jen.Code {
	if t != tModel {
		return nil
	}
	return []jen.Code{e.Field.decl()}
}

func (e *Embed) build(s stage) []jen.Code {
	if s != sBefore {
		return nil
	}
	return []jen.Code{e.Field.of(rModel).Op("=").Id("w").Dot("Embedding").Call(jen.Lit(e.Path), e.vocab.Code(), fHidden.of(rModel))}
}

// forward are Forward's first lines: h from tokens.
func (e *Embed) forward() []jen.Code {
	out := []jen.Code{jen.Id("h").Op(":=").Add(apply(e.Field.of(rModel), jen.Id("tokens"))).Comment("[B, L, hidden]")}
	if e.scale != nil {
		out = append(out, jen.Id("h").Op("=").Add(call("MultiplyScalar", jen.Id("h"), e.scale.of(rModel))).Comment(inline(e.scale.Value.Text)))
	}
	return out
}
