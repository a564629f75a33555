package gen

import "github.com/dave/jennifer/jen"

// The optional scalars: numbers from the config that some architectures
// multiply, divide or cap by and others lack. One table says for each where
// the descriptor sets it, which generated type holds it and under what
// name; every emitter reads it from there.

// ScalarRole names an optional scalar.
type ScalarRole int

const (
	EmbedScale    ScalarRole = iota // embeddings times this
	ResidualScale                   // every residual branch times this
	AttnSoftcap                     // attention scores capped as tanh(s / c) * c
	LogitsDivisor                   // logits / this
	FinalSoftcap                    // logits capped as tanh(x / c) * c
	LogitsScale                     // logits times this
	InputDivisor                    // the final hidden states / this, before the head
)

// scalarTable is every optional scalar of the language.
var scalarTable = []struct {
	role  ScalarRole
	path  string // in the descriptor
	owner goType
	name  string // the Go field
}{
	{EmbedScale, "structure.embed_scale", tModel, "embedScale"},
	{ResidualScale, "structure.residual_scale", tLayer, "residualScale"},
	{AttnSoftcap, "structure.attention.softcap", tAttention, "softcap"},
	{LogitsDivisor, "structure.head.divide", tModel, "logitsDivisor"},
	{FinalSoftcap, "structure.head.softcap", tModel, "finalSoftcap"},
	{LogitsScale, "structure.head.scale", tModel, "logitsScale"},
	{InputDivisor, "structure.head.divide_input", tModel, "inputDivisor"},
}

// scalarLeaf is where a descriptor sets each scalar.
func scalarLeaf(s *Structure, r ScalarRole) F[Expr] {
	switch r {
	case EmbedScale:
		return s.EmbedScale
	case ResidualScale:
		return s.ResidualScale
	case AttnSoftcap:
		return s.Attention.Softcap
	case LogitsDivisor:
		return s.Head.Divide
	case LogitsScale:
		return s.Head.Scale
	case InputDivisor:
		return s.Head.DivideInput
	}
	return s.Head.Softcap
}

// Scalar is one optional scalar an architecture has.
type Scalar struct {
	Role  ScalarRole
	Owner goType
	Field *field
	Value *Value
}

// of spells the scalar as its owner's receiver reads it.
func (s *Scalar) of(recv string) *jen.Statement { return s.Field.of(recv) }

// Scalars are the optional scalars an architecture has, in table order.
type Scalars struct {
	none
	List []*Scalar
}

// Get is the scalar of a role, or nil when the architecture lacks it.
func (ss *Scalars) Get(r ScalarRole) *Scalar {
	for _, s := range ss.List {
		if s.Role == r {
			return s
		}
	}
	return nil
}

// scalars resolves the table against a descriptor.
func (b *builder) scalars(sc *scope) error {
	for _, row := range scalarTable {
		v, err := b.optValue(scalarLeaf(&b.d.Structure, row.role), row.path, TFloat, sc)
		if err != nil {
			return err
		}
		if v != nil {
			b.a.Scalars.List = append(b.a.Scalars.List, &Scalar{
				Role: row.role, Owner: row.owner, Value: v,
				Field: newField(row.name, float64Type, v.Text),
			})
		}
	}
	return nil
}

func (ss *Scalars) params(t goType) []jen.Code {
	var out []jen.Code
	for _, s := range ss.List {
		if s.Owner == t {
			out = append(out, s.Field.decl())
		}
	}
	return out
}

func (ss *Scalars) inits(t goType) []kvPair {
	var out []kvPair
	for _, s := range ss.List {
		if s.Owner == t {
			out = append(out, kvPair{s.Field.key(), s.Value.Code()})
		}
	}
	return out
}
