package gen

import (
	"fmt"
	"sort"

	"github.com/dave/jennifer/jen"
)

// The MLP: the feed-forward block of each layer. Its kinds live one per
// file (mlp_*.go), each registering itself; a new kind is a new file.

// MLPKind is the feed-forward block's kind.
type MLPKind string

// mlpKind is what differs between MLP kinds.
type mlpKind interface {
	// doc says what the block computes.
	doc() string
	// projs are its linear layers, in checkpoint order; hidden and inner
	// spell the widths.
	projs(n ResolvedNames, hidden, inner func() *jen.Statement, bias *Value) []Proj
	// body is MLP.forward's body on x; proj(i, x) applies the i-th of projs,
	// and projs(x, i, j, ...) several of them that read x, as one
	// nn.Products.
	body(proj func(i int, x jen.Code) *jen.Statement, projs func(x jen.Code, is ...int) *jen.Statement) []jen.Code
}

var mlpKinds = map[MLPKind]mlpKind{}

// registerMLP adds an MLP kind to the language.
func registerMLP(name MLPKind, k mlpKind) { mlpKinds[name] = k }

func (MLPKind) values() []string {
	var out []string
	for k := range mlpKinds {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}

// MLP is the feed-forward block, resolved.
type MLP struct {
	none
	Kind   MLPKind
	Hidden *Value
	Bias   *Value
	Field  *field // the Layer's MLP
	Name   string // its checkpoint name
	Projs  []Proj
	Sparse *MoE // nil: no experts (mlp_moe.go)

	kind mlpKind
	act  *field // an activation with parameters of its own (mlpActivation); nil without
	// single: a single block's layer holds the MLP only where loading
	// chose it (a pointer), and the mixer slot puts its build lines in
	// that branch (block_single.go).
	single bool
	// Absent: a single block with no feed-forward layer (Mamba2): the MLP
	// emits nothing.
	Absent bool
	// shift, for a shifted kind, is its mix weight; slots the layer's
	// state slots, the last of them its own (set with the mixers).
	shift *field
	slots int
}

// shifted reports whether the kind reads the previous token (mlpShifted).
func (p *MLP) shifted() bool {
	_, ok := mlpKinds[p.Kind].(mlpShifted)
	return ok
}

// mlpShifted is an MLP kind that reads the previous token's input too (a
// token shift): a layer's state cache keeps it in its last slot, the
// forward takes the cache, and mix is the per-channel weight, a module of
// the MLP, that moves x toward it.
type mlpShifted interface {
	mix() string
}

// mlpActivation is an MLP kind whose activation has parameters of its own:
// a module of the MLP under name, of nn type typ, that w.<loader>(name) loads.
type mlpActivation interface {
	activation() (name, typ, loader string)
}

func (p *MLP) link(a *Arch) {
	n := a.Names
	p.kind = mlpKinds[p.Kind]
	// An empty name: the MLP's modules sit in the layer itself (BERT's
	// intermediate.dense and output.dense).
	field := goName(n.MLP)
	if field == "" {
		field = "MLP"
	}
	p.Field, p.Name = newField(field, func() *jen.Statement { return jen.Id("MLP") }, n.MLP), n.MLP
	if p.single {
		p.Field.typ = func() *jen.Statement { return jen.Op("*").Id("MLP") }
	}
	p.Projs = p.kind.projs(n, func() *jen.Statement { return fHidden.of(rModel) }, p.Hidden.Code, p.Bias)
	if m := p.Sparse; m != nil {
		// a router whose checkpoint name spells a dense projection's Go
		// name (laguna's gate.proj beside gate_proj) is the MLP's Router
		for _, x := range p.Projs {
			if x.Field.name == m.routerField.name {
				m.routerField.name = "Router"
			}
		}
	}
	if act, ok := p.kind.(mlpActivation); ok {
		name, typ, _ := act.activation()
		p.act = newField(goName(name), nnType(typ), name)
	}
	if sh, ok := p.kind.(mlpShifted); ok {
		p.shift = newField(goName(sh.mix()), func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }, sh.mix()+": the previous token's weight per channel")
	}
}

func (p *MLP) fields(t goType) []jen.Code {
	if p.Absent {
		return nil
	}
	switch t {
	case tLayer:
		return []jen.Code{p.Field.decl()}
	case tMLP:
		var out []jen.Code
		if p.Sparse != nil {
			return p.sparseFields()
		}
		for _, x := range p.Projs {
			out = append(out, x.Field.decl())
		}
		if p.act != nil {
			out = append(out, p.act.decl())
		}
		if p.shift != nil {
			out = append(out, p.shift.decl())
		}
		return out
	}
	return nil
}

func (p *MLP) build(s stage) []jen.Code {
	if s != sLayer || p.single {
		return nil
	}
	return p.layerBuild()
}

// layerBuild are its lines in the loop over layers.
func (p *MLP) layerBuild() []jen.Code {
	if p.Sparse != nil {
		return p.sparseBuild()
	}
	var out []jen.Code
	for _, x := range p.Projs {
		out = append(out, x.load(rMLP, p.Name))
	}
	if act, ok := p.kind.(mlpActivation); ok {
		name, _, loader := act.activation()
		out = append(out, p.act.of(rMLP).Op("=").Id("lw").Dot(loader).Call(jen.Lit(joinName(p.Name, name))))
	}
	if sh, ok := p.kind.(mlpShifted); ok {
		out = append(out, p.shift.of(rMLP).Op("=").Id("lw").Dot("Reshaped").Call(jen.Lit(joinName(p.Name, sh.mix())), fHidden.of(rModel)))
	}
	return out
}

// forward spells the layer's MLP on x.
func (p *MLP) forward(x jen.Code) *jen.Statement {
	if p.shift != nil {
		return p.Field.of(rLayer).Dot("forward").Call(g(), x, jen.Id("c"))
	}
	return p.Field.of(rLayer).Dot("forward").Call(g(), x)
}

// emitForward writes MLP.forward.
func (p *MLP) emitForward(f *jen.File) {
	if p.Absent {
		return
	}
	if p.Sparse != nil {
		p.emitSparseForward(f)
		return
	}
	if p.shift != nil {
		p.emitShiftedForward(f)
		return
	}
	f.Comment(comment("forward is " + p.kind.doc() + "."))
	f.Func().Params(jen.Id(rMLP).Op("*").Id("MLP")).Id("forward").Params(graphParam(), jen.Id("x").Add(arrayType())).Add(arrayType()).Block(p.kind.body(p.proj, p.products)...)
}

// emitShiftedForward writes MLP.forward of a shifted kind:
//
//	func (p *MLP) forward(g, x, c) *mlx.Array {
//		st := nn.StatesOf(g, c, 3) // slot 2: the previous token's x
//		x = nn.Lerp(g, x, nn.ShiftDelta(g, st, 2, x), p.XK)
//		... // the kind's body on x
//	}
func (p *MLP) emitShiftedForward(f *jen.File) {
	last := p.slots - 1
	body := []jen.Code{
		jen.Id("st").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(p.slots)).Comment(fmt.Sprintf("slot %d: the previous token's x", last)),
		jen.Id("x").Op("=").Qual(nnPkg, "Lerp").Call(g(), jen.Id("x"), jen.Qual(nnPkg, "ShiftDelta").Call(g(), jen.Id("st"), jen.Lit(last), jen.Id("x")), p.shift.of(rMLP)),
	}
	body = append(body, p.kind.body(p.proj, p.products)...)
	f.Comment(comment("forward is " + p.kind.doc() + "."))
	f.Func().Params(jen.Id(rMLP).Op("*").Id("MLP")).Id("forward").Params(graphParam(), jen.Id("x").Add(arrayType()), jen.Id("c").Qual(kvPkg, "Cache")).Add(arrayType()).Block(body...)
}

// proj spells the i-th projection on x.
func (p *MLP) proj(i int, x jen.Code) *jen.Statement { return apply(p.Projs[i].Field.of(rMLP), x) }

// products spells the projections is on x as one nn.Products.
func (p *MLP) products(x jen.Code, is ...int) *jen.Statement {
	args := []jen.Code{g(), x}
	for _, i := range is {
		args = append(args, p.Projs[i].Field.of(rMLP))
	}
	return jen.Qual(nnPkg, "Products").Call(args...)
}

// proj is a linear layer of an MLP named n.
func mlpProj(name string, out, in func() *jen.Statement, bias *Value) Proj {
	return Proj{Field: linear(name), Name: name, Out: out, In: in, Bias: bias}
}

// shardPart is how an MLP kind splits one of its projections: its role,
// and its equal parts when it is fused (gate_up: 2).
type shardPart struct {
	role  ShardRole
	parts int
}

// mlpSharder is an MLP kind that splits over a group: shardParts are the
// roles of its projs, in order.
type mlpSharder interface {
	shardParts() []shardPart
}

// shard splits the MLP by its inner width, which the group divides: the
// projections into it are all-to-sharded, the one out of it sharded-to-all.
func (p *MLP) shard(plan *ShardPlan, a *Arch) {
	if p.Absent {
		return
	}
	if p.Sparse != nil {
		p.Sparse.shard(plan, a, p)
		return
	}
	p.shardDense(plan, a)
}

// shardDense splits the dense MLP as its kind says.
func (p *MLP) shardDense(plan *ShardPlan, a *Arch) {
	s, ok := p.kind.(mlpSharder)
	if !ok {
		plan.refuse("its %s MLP has no tensor-parallel roles", p.Kind)
		return
	}
	plan.count(a, p.Hidden, "structure.mlp.hidden")
	for i, part := range s.shardParts() {
		plan.tag(p.Name, p.Projs[i], part.role, part.parts)
	}
}

// resolveMLP resolves structure.mlp, and structure.moe where the layers
// hold experts (mlp_moe.go).
func (b *builder) resolveMLP(sc *scope) error {
	s := &b.d.Structure.MLP
	l := b.leaves(sc)
	m := &MLP{
		Kind:   s.Kind.V,
		Hidden: l.mustLayer(s.Hidden, "structure.mlp.hidden", TInt),
		Bias:   l.must(s.Bias, "structure.mlp.bias", TBool),
	}
	if l.err != nil {
		return l.err
	}
	b.a.MLP = m
	var err error
	m.Sparse, err = b.buildMoE(sc)
	return err
}

// mlpDefaults: a SwiGLU of the config's intermediate_size, no biases.
func mlpDefaults(d *Descriptor) {
	m, f := &d.Structure.MLP, d.file
	setDefault(&m.Kind, MLPKind("swiglu"), f)
	exprDefault(&m.Hidden, "intermediate_size", f)
	exprDefault(&m.Bias, "false", f)
}

// mlpRoles are the feed-forward block's checkpoint names.
var mlpRoles = []nameRole{
	{"mlp", "mlp", func(n *Names) *F[string] { return &n.MLP }, func(r *ResolvedNames) *string { return &r.MLP }},
	{"gate", "gate_proj", func(n *Names) *F[string] { return &n.Gate }, func(r *ResolvedNames) *string { return &r.Gate }},
	{"up", "up_proj", func(n *Names) *F[string] { return &n.Up }, func(r *ResolvedNames) *string { return &r.Up }},
	{"down", "down_proj", func(n *Names) *F[string] { return &n.Down }, func(r *ResolvedNames) *string { return &r.Down }},
	{"gate_up", "gate_up_proj", func(n *Names) *F[string] { return &n.GateUp }, func(r *ResolvedNames) *string { return &r.GateUp }},
	{"fc", "c_fc", func(n *Names) *F[string] { return &n.FC }, func(r *ResolvedNames) *string { return &r.FC }},
	{"proj", "c_proj", func(n *Names) *F[string] { return &n.Proj }, func(r *ResolvedNames) *string { return &r.Proj }},
}
