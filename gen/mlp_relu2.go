package gen

import "github.com/dave/jennifer/jen"

// The ungated relu² MLP: down(relu(up(x))²).

type relu2MLP struct{}

func init() { registerMLP("relu2", relu2MLP{}) }

func (relu2MLP) doc() string { return "the ungated feed-forward block: down(relu(up(x))²)" }

func (relu2MLP) projs(n ResolvedNames, hidden, inner func() *jen.Statement, bias *Value) []Proj {
	return []Proj{
		mlpProj(n.Up, inner, hidden, bias),
		mlpProj(n.Down, hidden, inner, bias),
	}
}

func (relu2MLP) body(proj func(int, jen.Code) *jen.Statement, _ func(jen.Code, ...int) *jen.Statement) []jen.Code {
	return []jen.Code{jen.Return(proj(1, jen.Qual(nnPkg, "ReLUSquared").Call(g(), proj(0, jen.Id("x")))))}
}

func (relu2MLP) shardParts() []shardPart {
	return []shardPart{{AllToSharded, 1}, {ShardedToAll, 1}}
}
