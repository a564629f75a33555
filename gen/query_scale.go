package gen

import "github.com/dave/jennifer/jen"

// Position-scaled queries (structure.attention.query_scale).

// QueryScale multiplies each query, after the rope, by
// 1 + beta * log(1 + floor(p / positions)) at its position p.
type QueryScale struct {
	Beta, Positions *Value

	beta, positions *field
}

func newQueryScale(beta, positions *Value) *QueryScale {
	if beta == nil {
		return nil
	}
	return &QueryScale{Beta: beta, Positions: positions,
		beta:      newField("qScaleBeta", float64Type, beta.Text),
		positions: newField("qScalePositions", intType, positions.Text)}
}

func (qs *QueryScale) params(t goType) []jen.Code {
	if qs == nil || t != tAttention {
		return nil
	}
	return []jen.Code{qs.beta.decl(), qs.positions.decl()}
}

func (qs *QueryScale) inits(t goType) []kvPair {
	if qs == nil || t != tAttention {
		return nil
	}
	return []kvPair{{qs.beta.key(), qs.Beta.Code()}, {qs.positions.key(), qs.Positions.Code()}}
}

// forward are its lines in Attention.forward, on q [B, heads, L, head_dim].
func (qs *QueryScale) forward() []jen.Code {
	if qs == nil {
		return nil
	}
	return []jen.Code{
		jen.Id("q").Op("=").Qual(nnPkg, "ScaleQueries").Call(g(), jen.Id("q"), jen.Id("c").Dot("Offset").Call(), qs.beta.of(rAttn), qs.positions.of(rAttn)).
			Comment("q * (1 + beta * log(1 + floor(position / positions)))"),
	}
}

// resolveQueryScale resolves structure.attention.query_scale: beta and
// positions, both or neither.
func (b *builder) resolveQueryScale(sc *scope) error {
	qs := &b.d.Structure.Attention.QueryScale
	if qs.Beta.IsSet() != qs.Positions.IsSet() {
		pos := qs.Beta.Pos
		if !qs.Beta.IsSet() {
			pos = qs.Positions.Pos
		}
		return errAt(pos, "structure.attention.query_scale", "beta and positions go together")
	}
	if !qs.Beta.IsSet() {
		return nil
	}
	beta, err := b.value(qs.Beta, "structure.attention.query_scale.beta", TFloat, sc)
	if err != nil {
		return err
	}
	pos, err := b.value(qs.Positions, "structure.attention.query_scale.positions", TInt, sc)
	if err != nil {
		return err
	}
	b.a.Attn.QueryScale = newQueryScale(beta, pos)
	return nil
}
