package gen

import "github.com/dave/jennifer/jen"

// Attention's added constructs: q and k norms with a weight per head
// (each_head), q and k norms present only where a condition holds
// (qk_norm_when), and queries scaled by their position (query_scale).

// eachHead normalises each head over head_dim without affine parameters,
// then scales it by its own weight [heads, head_dim].
const eachHead = "each_head"

// loadQKNorms are build's lines loading the q and k norms (over q and k
// features), only when QKNormWhen holds if it is set.
func (at *Attention) loadQKNorms(q, k jen.Code) []jen.Code {
	qn, kn := at.Name+"."+at.qNormName, at.Name+"."+at.kNormName
	var out []jen.Code
	if at.QKNorm == eachHead {
		out = []jen.Code{
			at.QNorm.of(rAttn).Op("=").Id("lw").Dot("HeadNorm").Call(jen.Lit(qn), at.heads.of(rAttn), at.headDim.of(rAttn), at.norm.Eps.Code()),
			at.KNorm.of(rAttn).Op("=").Id("lw").Dot("HeadNorm").Call(jen.Lit(kn), at.kvHeads.of(rAttn), at.headDim.of(rAttn), at.norm.Eps.Code()),
		}
	} else {
		out = []jen.Code{
			at.QNorm.of(rAttn).Op("=").Add(at.norm.load("lw", qn, q)),
			at.KNorm.of(rAttn).Op("=").Add(at.norm.load("lw", kn, k)),
		}
	}
	if at.QKNormWhen != nil {
		return []jen.Code{jen.If(at.QKNormWhen.Code()).Block(out...).Comment("otherwise nil norms, which leave q and k as they are")}
	}
	return out
}

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
