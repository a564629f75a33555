package gen

import (
	"github.com/dave/jennifer/jen"
)

// Experts beside the dense MLP: a sparse block that runs on the same layer
// as the dense MLP rather than in its place, each branch with norms of its
// own (structure.moe.beside_dense). The router reads the residual stream as
// it is; the experts read it through a norm of theirs (in_norm); the dense
// MLP's output (dense_norm) and the experts' (out_norm) are normed and
// summed before the block's own norm after the MLP. With it come a router
// whose input is RMS-normed by a learned scale times a factor
// (router_norm), a learned scale per expert on the picked weights
// (expert_scale), and router and experts stored under the layer rather
// than the MLP (weights.experts.at: layer).

// ExpertsBeside is structure.moe.beside_dense, resolved.
type ExpertsBeside struct {
	names  [3]string // the dense output's, the experts' input's and output's norms
	fields [3]*field
	field  *field // the MLP's nn.ExpertsBeside (sparse layers)
	norm   *Norm
}

// besideDefaults fills the added keys' defaults.
func besideDefaults(d *Descriptor) {
	m, n, f := &d.Structure.MoE, &d.Weights.Experts, d.file
	setDefault(&m.Precise, true, f)
	setDefault(&m.ExpertScale, false, f)
	setDefault(&m.Beside, false, f)
	setDefault(&n.At, "mlp", f)
	setDefault(&n.RouterScale, "router.scale", f)
	setDefault(&n.ExpertScale, "router.per_expert_scale", f)
	setDefault(&n.DenseNorm, "post_feedforward_layernorm_1", f)
	setDefault(&n.InNorm, "pre_feedforward_layernorm_2", f)
	setDefault(&n.OutNorm, "post_feedforward_layernorm_2", f)
}

// buildBeside resolves the router's norm and scale, the experts' module
// and the block beside the dense MLP into m.
func (b *builder) buildBeside(m *MoE, sc *scope) error {
	s, n := &b.d.Structure.MoE, b.d.Weights.Experts
	if !s.Precise.V {
		if m.Router != "topk_softmax" || m.Float32 {
			return errAt(s.Precise.Pos, "structure.moe.precise", "only a topk_softmax router without float32 takes its softmax in the logits' dtype")
		}
		m.Imprecise = true
	}
	if s.RouterNorm.IsSet() {
		if m.Router == "sigmoid_bias_norm" {
			return errAt(s.RouterNorm.Pos, "structure.moe.router_norm", "a sigmoid_bias_norm router reads its input in float32, with no norm")
		}
		v, err := b.value(s.RouterNorm, "structure.moe.router_norm", TFloat, sc)
		if err != nil {
			return err
		}
		m.RouterNorm, m.routerNormEps = v, b.a.Norm.Eps
	}
	m.ExpertScale = s.ExpertScale.V
	for _, x := range []struct {
		f   F[string]
		key string
	}{{n.RouterScale, "router_scale"}, {n.ExpertScale, "expert_scale"}, {n.DenseNorm, "dense_norm"}, {n.InNorm, "in_norm"}, {n.OutNorm, "out_norm"}} {
		if !checkpointName.MatchString(x.f.V) {
			return errAt(x.f.Pos, "weights.experts."+x.key, "%q is not a checkpoint name (dotted names of letters, digits and _)", x.f.V)
		}
	}
	m.routerScaleName, m.expertScaleName = n.RouterScale.V, n.ExpertScale.V
	switch n.At.V {
	case "mlp":
	case "layer":
		m.atLayer = true
	default:
		return errAt(n.At.Pos, "weights.experts.at", "unknown %q (want mlp or layer)", n.At.V)
	}
	if !s.Beside.V {
		return nil
	}
	if m.Shared != nil {
		// (dense_from_shared needs a shared expert: refused with it)
		return errAt(s.Beside.Pos, "structure.moe.beside_dense", "experts beside the dense MLP take no shared expert: the dense MLP is on every token already")
	}
	bs := &ExpertsBeside{names: [3]string{n.DenseNorm.V, n.InNorm.V, n.OutNorm.V}, norm: b.a.Norm}
	for i, name := range bs.names {
		bs.fields[i] = bs.norm.field(goName(name), name+": "+[...]string{"the dense MLP's output", "the experts' input", "the experts' output"}[i]+" (sparse layers)")
	}
	bs.field = newField("Beside", nnType("ExpertsBeside"), "the experts beside the dense MLP, wired (sparse layers; nil on the others)")
	m.Beside = bs
	return nil
}

// under is the checkpoint path of a part x of the sparse block, whose
// module is the MLP (scope) or the layer.
func (m *MoE) under(scope, x string) string {
	if m.atLayer {
		return x
	}
	return scope + "." + x
}

// routerExtras adds the router's norm, per-expert scale and imprecise
// softmax to its literal; path places a name under the block's module.
func (m *MoE) routerExtras(router jen.Dict, path func(string) string) {
	hidden := fHidden.of(rModel)
	if m.Imprecise {
		router[jen.Id("Imprecise")] = jen.True()
	}
	if m.RouterNorm != nil {
		router[jen.Id("Norm")] = jen.Id("lw").Dot("RouterNorm").Call(jen.Lit(path(m.routerScaleName)), hidden.Clone(), m.RouterNorm.Code(), m.routerNormEps.Code())
	}
	if m.ExpertScale {
		router[jen.Id("ExpertScale")] = jen.Id("lw").Dot("Vector").Call(jen.Lit(path(m.expertScaleName)), m.Experts.Code())
	}
}

// besideFields are the MLP's fields with experts beside it: the dense
// projections (on every layer), the sparse block's, its norms and the
// wired block.
func (p *MLP) besideFields() []jen.Code {
	m, bs := p.Sparse, p.Sparse.Beside
	var out []jen.Code
	for _, x := range p.Projs {
		out = append(out, x.Field.decl())
	}
	out = append(out, m.routerField.decl(), m.expertsField.decl(), jen.Line())
	for _, f := range bs.fields {
		out = append(out, f.decl())
	}
	return append(out, jen.Line(), m.moe.decl(), bs.field.decl())
}

// besideBuild loads a layer's dense MLP, and on the sparse layers the
// experts beside it with their norms.
func (p *MLP) besideBuild() []jen.Code {
	m, bs := p.Sparse, p.Sparse.Beside
	var out []jen.Code
	for _, x := range p.Projs {
		out = append(out, x.load(rMLP, m.dense))
	}
	sparse := m.build(p.Name)
	hidden := fHidden.of(rModel)
	wired := jen.Dict{jen.Id("MoE"): jen.Op("&").Add(m.moe.of(rMLP))}
	for i, f := range bs.fields {
		sparse = append(sparse, f.of(rMLP).Op("=").Add(bs.norm.load("lw", bs.names[i], hidden.Clone())))
		wired[jen.Id([...]string{"DenseNorm", "InNorm", "OutNorm"}[i])] = f.of(rMLP)
	}
	sparse = append(sparse, bs.field.of(rMLP).Op("=").Op("&").Qual(nnPkg, "ExpertsBeside").Values(wired))
	if m.allSparse() {
		return append(out, sparse...)
	}
	return append(out, jen.If(m.Sparse.Code()).Block(sparse...))
}

// emitBesideForward writes MLP.forward with experts beside it:
//
//	func (p *MLP) forward(g, h, x) *mlx.Array {
//		return p.Beside.Apply(g, h, p.dense(g, x))
//	}
func (p *MLP) emitBesideForward(f *jen.File) {
	m := p.Sparse
	f.Comment(comment("forward is the layer's feed-forward block on x, its normed input: the dense MLP, and on the sparse layers " + m.doc() +
		", beside it; the router reads h, the residual stream, as it is, the experts read it normed by their own norm, and the two outputs are normed each and summed (nn.ExpertsBeside)."))
	f.Func().Params(jen.Id(rMLP).Op("*").Id("MLP")).Id("forward").Params(graphParam(), jen.Id("h"), jen.Id("x").Add(arrayType())).Add(arrayType()).Block(
		jen.Return(m.Beside.field.of(rMLP).Dot("Apply").Call(g(), jen.Id("h"), jen.Id(rMLP).Dot("dense").Call(g(), jen.Id("x")))))
	f.Line()
	f.Comment(comment("dense is " + p.kind.doc() + ", on every layer."))
	f.Func().Params(jen.Id(rMLP).Op("*").Id("MLP")).Id("dense").Params(graphParam(), jen.Id("x").Add(arrayType())).Add(arrayType()).Block(p.kind.body(p.proj, p.products)...)
}

// forwardFrom spells the layer's MLP on x, the normed copy of the residual
// stream h (which experts beside the dense MLP route from).
func (p *MLP) forwardFrom(h, x jen.Code) *jen.Statement {
	if p.beside() {
		return p.Field.of(rLayer).Dot("forward").Call(g(), h, x)
	}
	return p.forward(x)
}

// beside reports whether the layers run experts beside the dense MLP.
func (p *MLP) beside() bool { return p.Sparse != nil && p.Sparse.Beside != nil }
