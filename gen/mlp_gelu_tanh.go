package gen

import "github.com/dave/jennifer/jen"

// The plain MLP with the tanh-approximate GELU: proj(gelu(fc(x))).

type plainGELUTanh struct{ plainGELU }

func init() { registerMLP("gelu_tanh", plainGELUTanh{}) }

func (plainGELUTanh) doc() string {
	return "the plain feed-forward block: proj(gelu(fc(x))), tanh-approximate GELU"
}

func (plainGELUTanh) body(proj func(int, jen.Code) *jen.Statement, _ func(jen.Code, ...int) *jen.Statement) []jen.Code {
	return []jen.Code{jen.Return(proj(1, call("GELUApprox", proj(0, jen.Id("x")))))}
}
