package gen

import (
	"github.com/dave/jennifer/jen"
)

// The resolved network is made of components, organised by kind: the
// embedding, the block and its norm slots, attention, the rope, the MLP
// (one file per kind), and the head. Each is a value of the resolved model
// that owns what it emits: the fields it adds to the generated types, its
// lines in build, and its forward code. The emitters (emit_model.go,
// emit_forward.go) only put the pieces in order.

// goType is a generated Go type, by name: each module owns its
// hyperparameters and its forward method, as in mlx-lm's model files. The
// set is open: a mixer kind (mixer.go) brings a type of its own.
type goType string

const (
	tModel     goType = "Model"     // the stack, Forward
	tLayer     goType = "Layer"     // one decoder layer, its residual wiring
	tAttention goType = "Attention" // self-attention
	tMLP       goType = "MLP"       // the feed-forward block
)

// stage is where in build a line goes.
type stage int

const (
	sBefore stage = iota // before the layers: shared tables, the embedding
	sLayer               // in the loop over layers (l is the layer, lw its weights)
	sAfter               // after the layers: the final norm, the head, the tables
)

// component is one part of the resolved network.
type component interface {
	// fields are the modules and weights it adds to the generated type t.
	fields(t goType) []jen.Code
	// params are the hyperparameters it adds to t, read from the config.
	params(t goType) []jen.Code
	// inits are its entries of t's composite literal in build.
	inits(t goType) []kvPair
	// build are its lines in build at stage s.
	build(s stage) []jen.Code
}

// none is a component's empty answer to a type or stage it has nothing
// for; components embed it.
type none struct{}

func (none) fields(goType) []jen.Code { return nil }
func (none) params(goType) []jen.Code { return nil }
func (none) inits(goType) []kvPair    { return nil }
func (none) build(stage) []jen.Code   { return nil }

// components are the parts of a's network in the order their fields and
// build lines appear.
func (a *Arch) components() []component {
	var mix component = a.Attn
	if a.Mixers != nil {
		mix = a.Mixers
	}
	cs := []component{a.Embed, mix, a.Rope, a.MLP, a.Block}
	if a.Attn.Sliding != nil {
		cs = append(cs, a.Attn.Sliding)
	}
	if a.Encoder != nil {
		cs = append(cs, a.Encoder)
	}
	if a.PerLayer != nil {
		cs = append(cs, a.PerLayer)
	}
	return append(cs, a.Head, &a.Scalars)
}

// collect gathers one answer of every component, in order.
func collect[T any](a *Arch, of func(component) []T) []T {
	var out []T
	for _, c := range a.components() {
		out = append(out, of(c)...)
	}
	return out
}

// fieldsOf, paramsOf, initsOf and buildAt collect every component's
// fields, hyperparameters and literal entries of type t, and its build
// lines at stage s.
func (a *Arch) fieldsOf(t goType) []jen.Code {
	return collect(a, func(c component) []jen.Code { return c.fields(t) })
}

func (a *Arch) paramsOf(t goType) []jen.Code {
	return collect(a, func(c component) []jen.Code { return c.params(t) })
}

func (a *Arch) initsOf(t goType) []kvPair {
	return collect(a, func(c component) []kvPair { return c.inits(t) })
}

func (a *Arch) buildAt(s stage) []jen.Code {
	return collect(a, func(c component) []jen.Code { return c.build(s) })
}

// field is one field of a generated type, named once here so that no
// emitter spells it.
type field struct {
	name string
	typ  func() *jen.Statement
	doc  string // trailing comment
}

func newField(name string, typ func() *jen.Statement, doc string) *field {
	return &field{name: name, typ: typ, doc: doc}
}

// decl declares the field.
func (f *field) decl() jen.Code {
	s := jen.Id(f.name).Add(f.typ())
	if f.doc != "" {
		s.Comment(inline(f.doc))
	}
	return s
}

// of spells the field of a receiver: of("a") is a.heads.
func (f *field) of(recv string) *jen.Statement { return jen.Id(recv).Dot(f.name) }

// key is the field as a composite literal's key.
func (f *field) key() string { return f.name }

func intType() *jen.Statement     { return jen.Int() }
func float32Type() *jen.Statement { return jen.Float32() }
func float64Type() *jen.Statement { return jen.Float64() }
func nnType(name string) func() *jen.Statement {
	return func() *jen.Statement { return jen.Op("*").Qual(nnPkg, name) }
}

// Receivers and locals of the generated code.
const (
	rModel = "m" // *Model
	rLayer = "l" // *Layer, in build and Layer.forward
	rAttn  = "a" // *Attention
	rMLP   = "p" // *MLP
)

// Fields of the generated Model that belong to no one component: the
// widths every component reads, and what the runtime keeps.
var (
	fHidden = newField("hidden", intType, "")
	fVocab  = newField("vocab", intType, "")
	fCaches = newField("caches", func() *jen.Statement { return jen.Index().Qual(nnPkg, "CacheSpec") }, "per layer")
	fParams = newField("params", nnType("Params"), "")
	fConfig = newField("Config", func() *jen.Statement { return jen.Op("*").Id("Config") }, "")
)

// g spells the graph; call an op on it.
func g() *jen.Statement { return jen.Id("g") }

func call(op string, args ...jen.Code) *jen.Statement { return g().Dot(op).Call(args...) }

func graphParam() jen.Code { return jen.Id("g").Op("*").Qual(mlxPkg, "Graph") }
func arrayType() jen.Code  { return jen.Op("*").Qual(mlxPkg, "Array") }

// apply spells module.Apply(g, x).
func apply(module *jen.Statement, x jen.Code) *jen.Statement {
	return module.Dot("Apply").Call(g(), x)
}
