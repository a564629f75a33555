package gen

import "github.com/dave/jennifer/jen"

// The embedding: token ids to the residual stream, optionally scaled,
// optionally normed (structure.embed_norm: RWKV-7's first layer norms its
// input before anything reads it, so the norm belongs to the stream), and
// optionally given a learned row for each position (structure.positions:
// GPT-2's wpe).

// Embed is the token embedding, resolved.
type Embed struct {
	none
	Field *field // Model's embedding table
	Path  string // its checkpoint name
	vocab *Value
	scale *Scalar
	// normName is the embedding norm's checkpoint name under the model's
	// prefix ("": none); norm its field, of the architecture's norm kind.
	normName string
	normFull string // under the model's prefix
	norm     *field
	kind     *Norm
	// positions is the learned position table's row count (nil: none),
	// posField the table (weights.names.positions).
	positions *Value
	posPath   string
	posField  *field
	// encoder: the positions' and token types' rows are added before the
	// norm, as BERT's embeddings add them (encoder.go).
	encoder *Encoder
}

func (e *Embed) link(a *Arch) {
	e.Path = a.path(a.Names.Embed)
	e.Field = newField(goName(a.Names.Embed), nnType("Embedding"), e.Path)
	e.vocab, e.scale = a.Vocab, a.Scalars.Get(EmbedScale)
	e.encoder = a.Encoder
	if e.positions != nil {
		e.posPath = a.path(a.Names.Positions)
		e.posField = newField(goName(a.Names.Positions), nnType("Embedding"), e.posPath+": a row for each position")
	}
	if e.normName != "" {
		e.kind = a.Norm
		e.normFull = a.path(e.normName)
		e.norm = e.kind.field("EmbedNorm", e.normFull+": the embeddings' norm")
	}
}

func (e *Embed) fields(t goType) []jen.Code {
	if t != tModel {
		return nil
	}
	out := []jen.Code{e.Field.decl()}
	if e.norm != nil {
		out = append(out, e.norm.decl())
	}
	if e.posField != nil {
		out = append(out, e.posField.decl())
	}
	return out
}

func (e *Embed) build(s stage) []jen.Code {
	if s != sBefore {
		return nil
	}
	out := []jen.Code{e.Field.of(rModel).Op("=").Id("w").Dot("Embedding").Call(jen.Lit(e.Path), e.vocab.Code(), fHidden.of(rModel))}
	if e.norm != nil {
		out = append(out, e.norm.of(rModel).Op("=").Add(e.kind.load("w", e.normFull, fHidden.of(rModel))))
	}
	if e.posField != nil {
		out = append(out, e.posField.of(rModel).Op("=").Id("w").Dot("Embedding").Call(jen.Lit(e.posPath), e.positions.Code(), fHidden.of(rModel)))
	}
	return out
}

// positionsForward are Hidden's lines after the mask (which binds a
// batch's row offsets to g): each token's position's row added to h; in
// an encoder, then its type's row and the embeddings' norm.
func (e *Embed) positionsForward() []jen.Code {
	var out []jen.Code
	if e.encoder != nil && e.posField != nil {
		out = append(out, e.encoder.positionsForward(e.posField)...)
	}
	if e.posField != nil && len(out) == 0 {
		out = append(out, jen.Id("h").Op("=").Qual(nnPkg, "AddPositions").Call(g(), jen.Id("h"), e.posField.of(rModel), jen.Id("caches").Index(jen.Lit(0))).Comment("+ the rows of the tokens' positions"))
	}
	if e.encoder != nil {
		out = append(out, e.encoder.typesForward()...)
		if e.norm != nil {
			out = append(out, jen.Id("h").Op("=").Add(apply(e.norm.of(rModel), jen.Id("h"))))
		}
	}
	return out
}

// forward are Hidden's first lines: h from tokens.
func (e *Embed) forward() []jen.Code {
	out := []jen.Code{jen.Id("h").Op(":=").Add(apply(e.Field.of(rModel), jen.Id("tokens"))).Comment("[B, L, hidden]")}
	if e.scale != nil {
		out = append(out, jen.Id("h").Op("=").Add(call("MultiplyScalar", jen.Id("h"), e.scale.of(rModel))).Comment(inline(e.scale.Value.Text)))
	}
	if e.norm != nil && e.encoder == nil {
		out = append(out, jen.Id("h").Op("=").Add(apply(e.norm.of(rModel), jen.Id("h"))))
	}
	return out
}
