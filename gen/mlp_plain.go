package gen

import "github.com/dave/jennifer/jen"

// The plain MLP: proj(gelu(fc(x))) with the exact (erf) GELU.

type plainGELU struct{}

func init() { registerMLP("gelu", plainGELU{}) }

func (plainGELU) doc() string {
	return "the plain feed-forward block: proj(gelu(fc(x))), exact (erf) GELU"
}

func (plainGELU) projs(n ResolvedNames, hidden, inner func() *jen.Statement, bias *Value) []Proj {
	return []Proj{
		mlpProj(n.FC, inner, hidden, bias),
		mlpProj(n.Proj, hidden, inner, bias),
	}
}

func (plainGELU) body(proj func(int, jen.Code) *jen.Statement, _ func(jen.Code, ...int) *jen.Statement) []jen.Code {
	return []jen.Code{jen.Return(proj(1, call("GELU", proj(0, jen.Id("x")))))}
}

func (plainGELU) shardParts() []shardPart {
	return []shardPart{{AllToSharded, 1}, {ShardedToAll, 1}}
}
