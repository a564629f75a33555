package gen

import "github.com/dave/jennifer/jen"

// The fused SwiGLU MLP: one gate_up projection split in two as activations
// (so a quantized matrix stays whole), down(silu(gate) * up).

type fusedSwiGLU struct{}

func init() { registerMLP("fused_swiglu", fusedSwiGLU{}) }

func (fusedSwiGLU) doc() string {
	return "the SwiGLU feed-forward block with gate and up fused in one projection: down(silu(gate) * up)"
}

func (fusedSwiGLU) projs(n ResolvedNames, hidden, inner func() *jen.Statement, bias *Value) []Proj {
	return []Proj{
		mlpProj(n.GateUp, func() *jen.Statement { return jen.Lit(2).Op("*").Add(inner()) }, hidden, bias),
		mlpProj(n.Down, hidden, inner, bias),
	}
}

func (fusedSwiGLU) body(proj func(int, jen.Code) *jen.Statement, _ func(jen.Code, ...int) *jen.Statement) []jen.Code {
	return []jen.Code{
		jen.Id("gu").Op(":=").Add(call("Split", proj(0, jen.Id("x")), jen.Lit(2), jen.Lit(-1))).Comment("gate, up: [B, L, intermediate] each"),
		jen.Return(proj(1, call("SwiGLU", jen.Id("gu").Index(jen.Lit(0)), jen.Id("gu").Index(jen.Lit(1))))),
	}
}

func (fusedSwiGLU) shardParts() []shardPart {
	return []shardPart{{AllToSharded, 2}, {ShardedToAll, 1}}
}

// The fused GELU-gated MLP (ModernBERT's Wi and Wo): one projection split
// in two, the exact (erf) GELU of the first half times the second.

type fusedGELUGated struct{}

func init() { registerMLP("fused_gelu_gated", fusedGELUGated{}) }

func (fusedGELUGated) doc() string {
	return "the GELU-gated feed-forward block with its two halves fused in one projection: down(gelu(first) * second), exact (erf) GELU"
}

func (fusedGELUGated) projs(n ResolvedNames, hidden, inner func() *jen.Statement, bias *Value) []Proj {
	return fusedSwiGLU{}.projs(n, hidden, inner, bias)
}

func (fusedGELUGated) body(proj func(int, jen.Code) *jen.Statement, _ func(jen.Code, ...int) *jen.Statement) []jen.Code {
	return []jen.Code{
		jen.Id("gu").Op(":=").Add(call("Split", proj(0, jen.Id("x")), jen.Lit(2), jen.Lit(-1))).Comment("the activated half, the gate: [B, L, intermediate] each"),
		jen.Return(proj(1, call("Multiply", call("GELU", jen.Id("gu").Index(jen.Lit(0))), jen.Id("gu").Index(jen.Lit(1))))),
	}
}

func (fusedGELUGated) shardParts() []shardPart {
	return []shardPart{{AllToSharded, 2}, {ShardedToAll, 1}}
}
