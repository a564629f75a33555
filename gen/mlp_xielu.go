package gen

import "github.com/dave/jennifer/jen"

// The ungated XieLU MLP: down(xielu(up(x))), the activation with learned
// scalars of its own (the module act_fn of the MLP).

type xieluMLP struct{}

func init() { registerMLP("xielu", xieluMLP{}) }

func (xieluMLP) doc() string {
	return "the ungated feed-forward block: down(xielu(up(x))), XieLU with its learned scalars"
}

func (xieluMLP) activation() (name, typ, loader string) { return "act_fn", "XieLU", "XieLU" }

func (xieluMLP) projs(n ResolvedNames, hidden, inner func() *jen.Statement, bias *Value) []Proj {
	return []Proj{
		mlpProj(n.Up, inner, hidden, bias),
		mlpProj(n.Down, hidden, inner, bias),
	}
}

func (k xieluMLP) body(proj func(int, jen.Code) *jen.Statement, _ func(jen.Code, ...int) *jen.Statement) []jen.Code {
	name, _, _ := k.activation()
	act := jen.Id(rMLP).Dot(goName(name))
	return []jen.Code{jen.Return(proj(1, act.Dot("Apply").Call(g(), proj(0, jen.Id("x")))))}
}

func (xieluMLP) shardParts() []shardPart {
	return []shardPart{{AllToSharded, 1}, {ShardedToAll, 1}}
}
