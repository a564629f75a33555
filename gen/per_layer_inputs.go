package gen

import (
	"github.com/dave/jennifer/jen"
)

// Per-layer inputs (structure.per_layer_inputs): a vector for each layer
// and token, made before the first layer from a wide embedding table and a
// projection of the scaled embeddings (nn.PerLayerInputs), and mixed into
// the stream by a gate at the end of each layer (nn.PerLayerGate). Their
// width is decided at load: a config whose width is 0 has none, and the
// forward pass runs the same lines (nil modules pass the stream on).

// perLayerNames are the modules' checkpoint names: the model's under its
// prefix, the layers' in each layer.
var perLayerNames = struct{ table, proj, norm, gate, layerProj, layerNorm string }{
	table:     "embed_tokens_per_layer",
	proj:      "per_layer_model_projection",
	norm:      "per_layer_projection_norm",
	gate:      "per_layer_input_gate",
	layerProj: "per_layer_projection",
	layerNorm: "post_per_layer_input_norm",
}

// PerLayerInputs is structure.per_layer_inputs, resolved.
type PerLayerInputs struct {
	none
	Width, Vocab *Value
	model, layer *field
	norm         *Norm
	layers       *Value
	path         func(string) string
}

func (p *PerLayerInputs) fields(t goType) []jen.Code {
	switch t {
	case tModel:
		return []jen.Code{p.model.decl()}
	case tLayer:
		return []jen.Code{p.layer.decl()}
	}
	return nil
}

// build makes the modules where the width is above 0:
//
//	if width := <width>; width > 0 {
//		m.PerLayerInputs = &nn.PerLayerInputs{Table: ..., Proj: ..., Norm: ..., ...}
//	}
//
// and in each layer its gate likewise.
func (p *PerLayerInputs) build(s stage) []jen.Code {
	width := jen.Id("width")
	hidden := fHidden.of(rModel)
	var set jen.Code
	switch s {
	case sBefore:
		all := p.layers.Code().Op("*").Add(width.Clone())
		set = p.model.of(rModel).Op("=").Op("&").Qual(nnPkg, "PerLayerInputs").Values(jen.Dict{
			jen.Id("Table"):  jen.Id("w").Dot("Embedding").Call(jen.Lit(p.path(perLayerNames.table)), p.Vocab.Code(), all.Clone()),
			jen.Id("Proj"):   jen.Id("w").Dot("Linear").Call(jen.Lit(p.path(perLayerNames.proj)), all.Clone(), hidden.Clone(), jen.False()),
			jen.Id("Norm"):   p.norm.load("w", p.path(perLayerNames.norm), width.Clone()),
			jen.Id("Layers"): p.layers.Code(),
			jen.Id("Width"):  width.Clone(),
			jen.Id("Hidden"): hidden.Clone(),
		})
	case sLayer:
		set = p.layer.of(rLayer).Op("=").Op("&").Qual(nnPkg, "PerLayerGate").Values(jen.Dict{
			jen.Id("Gate"): jen.Id("lw").Dot("Linear").Call(jen.Lit(perLayerNames.gate), width.Clone(), hidden.Clone(), jen.False()),
			jen.Id("Proj"): jen.Id("lw").Dot("Linear").Call(jen.Lit(perLayerNames.layerProj), hidden.Clone(), width.Clone(), jen.False()),
			jen.Id("Norm"): p.norm.load("lw", perLayerNames.layerNorm, hidden.Clone()),
		})
	default:
		return nil
	}
	return []jen.Code{jen.If(width.Clone().Op(":=").Add(p.Width.Code()), width.Clone().Op(">").Lit(0)).Block(set)}
}

// forward is Hidden's line after the embeddings: every layer's inputs.
func (p *PerLayerInputs) forward() jen.Code {
	return jen.Id("perLayer").Op(":=").Add(p.model.of(rModel)).Dot("Apply").Call(g(), jen.Id("tokens"), jen.Id("h")).Comment("[B, L, layers, width]; nil without per-layer inputs")
}

// arg is layer i's inputs, as the loop hands them to its forward.
func (p *PerLayerInputs) arg() jen.Code {
	return p.model.of(rModel).Dot("Layer").Call(g(), jen.Id("perLayer"), jen.Id("i"))
}

// mix is the layer's output h with its inputs (the parameter in) mixed in.
func (p *PerLayerInputs) mix(h jen.Code) *jen.Statement {
	return p.layer.of(rLayer).Dot("Apply").Call(g(), h, jen.Id("in"))
}

// resolvePerLayerInputs resolves structure.per_layer_inputs; it goes with
// a block of attention then the MLP, without other token mixers.
func (b *builder) resolvePerLayerInputs(sc *scope) error {
	d, a := &b.d.Structure.PerLayerInputs, b.a
	if !d.Width.IsSet() {
		return nil
	}
	l := b.leaves(sc)
	p := &PerLayerInputs{
		Width:  l.must(d.Width, "structure.per_layer_inputs.width", TInt),
		Vocab:  l.must(d.Vocab, "structure.per_layer_inputs.vocab", TInt),
		norm:   a.Norm,
		layers: a.Layers,
		path:   a.path,
		model:  newField("PerLayerInputs", func() *jen.Statement { return jen.Op("*").Qual(nnPkg, "PerLayerInputs") }, "each layer's input vectors; nil without them"),
		layer:  newField("PerLayerGate", func() *jen.Statement { return jen.Op("*").Qual(nnPkg, "PerLayerGate") }, "mixes the layer's input vector into its output; nil without them"),
	}
	if l.err != nil {
		return l.err
	}
	if err := b.wiredAfter(d.Width.Pos, "structure.per_layer_inputs", "per-layer inputs"); err != nil {
		return err
	}
	if a.Encoder != nil {
		return errAt(d.Width.Pos, "structure.per_layer_inputs", "an encoder takes no per-layer inputs")
	}
	a.PerLayer = p
	return nil
}
