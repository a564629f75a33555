package gen

import "github.com/dave/jennifer/jen"

// Gated MLPs: down(act(gate(x)) * up(x)), with SiLU (SwiGLU), the exact
// (erf) GELU, or the tanh-approximate GELU.

type gatedMLP struct {
	act  string // the Graph method of the activation
	glu  string // the Graph method of act(gate) * up as one op, if there is one
	what string
}

func init() {
	registerMLP("swiglu", gatedMLP{"SiLU", "SwiGLU", "the SwiGLU feed-forward block: down(silu(gate(x)) * up(x))"})
	registerMLP("gelu_gated", gatedMLP{"GELU", "", "the GELU-gated feed-forward block: down(gelu(gate(x)) * up(x)), exact (erf) GELU"})
	registerMLP("gelu_tanh_gated", gatedMLP{"GELUApprox", "", "the GELU-gated feed-forward block: down(gelu(gate(x)) * up(x)), tanh-approximate GELU"})
}

func (k gatedMLP) doc() string { return k.what }

func (gatedMLP) projs(n ResolvedNames, hidden, inner func() *jen.Statement, bias *Value) []Proj {
	return []Proj{
		mlpProj(n.Gate, inner, hidden, bias),
		mlpProj(n.Up, inner, hidden, bias),
		mlpProj(n.Down, hidden, inner, bias),
	}
}

func (k gatedMLP) body(proj func(int, jen.Code) *jen.Statement, projs func(jen.Code, ...int) *jen.Statement) []jen.Code {
	return []jen.Code{
		jen.Id("gateUp").Op(":=").Add(projs(jen.Id("x"), 0, 1)).Comment("gate(x), up(x): [B, L, intermediate] each"),
		jen.Return(proj(2, k.gated(jen.Id("gateUp").Index(jen.Lit(0)), jen.Id("gateUp").Index(jen.Lit(1))))),
	}
}

// gated spells act(gate) * up.
func (k gatedMLP) gated(gate, up jen.Code) *jen.Statement {
	if k.glu != "" {
		return call(k.glu, gate, up)
	}
	return call("Multiply", call(k.act, gate), up)
}

func (gatedMLP) shardParts() []shardPart {
	return []shardPart{{AllToSharded, 1}, {AllToSharded, 1}, {ShardedToAll, 1}}
}
