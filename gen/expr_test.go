package gen

import (
	"fmt"
	"testing"

	"github.com/dave/jennifer/jen"
)

func testScope() *scope {
	names := map[string]Type{"a": TInt, "b": TInt, "c": TInt, "x": TFloat, "on": TBool, "off": TBool,
		"kinds": TStrings, "list": TInts, "s": TString, "limits": TFloats}
	return &scope{
		names:     names,
		code:      func(n string) jen.Code { return jen.Id("c").Dot(goName(n)) },
		positive:  func(n string) bool { return n == "b" },
		indexable: func(n string) bool { return n == "kinds" },
		fixed: func(n string) int {
			if n == "limits" {
				return 2
			}
			return 0
		},
		layers: jen.Id("c").Dot("N"),
	}
}

func TestExpressions(t *testing.T) {
	for _, c := range []struct{ in, t, want string }{
		{"a // b", "int", "c.A / c.B"},
		{"a % b == 0", "bool", "c.A%c.B == 0"},
		{"(a + b) * c", "int", "(c.A + c.B) * c.C"},
		{"a - (b - c)", "int", "c.A - (c.B - c.C)"},
		{"a - b - c", "int", "c.A - c.B - c.C"},
		{"a ** -0.5", "float", "math.Pow(float64(c.A), -0.5)"},
		{"1 / x ** 0.5", "float", "1.0 / math.Pow(c.X, 0.5)"},
		{"-a ** 2", "float", "-math.Pow(float64(c.A), 2.0)"},
		{"a * x", "float", "float64(c.A) * c.X"},
		{"a / b", "float", "float64(c.A) / float64(c.B)"},
		{"int(a * x)", "int", "int(float64(c.A) * c.X)"},
		{"int(on)", "int", "nn.Btoi(c.On)"},
		{"sqrt(a)", "float", "math.Sqrt(float64(c.A))"},
		{"!(on && off) || a > x", "bool", "!(c.On && c.Off) || float64(c.A) > c.X"},
		{`count(kinds, "full") > 0`, "bool", `nn.Count(c.Kinds, "full") > 0`},
		{"len(list)", "int", "len(c.List)"},
		{"limits[1] * 2", "float", "c.Limits[1] * 2.0"},
		{"min(x, inf)", "float", "min(c.X, math.Inf(1))"},
		{`at(kinds, a) == "full"`, "bool", `nn.At(c.Kinds, c.A) == "full"`},
		{"min(a, b)", "int", "min(c.A, c.B)"},
		{"round(x * 2)", "int", "nn.Round(c.X * 2.0)"},
		{`if(a > b, "full", "sliding")`, "string", `nn.If(c.A > c.B, "full", "sliding")`},
		{"if(on, a, x)", "float", "nn.If(c.On, float64(c.A), c.X)"},
		{"max(a, x)", "float", "max(float64(c.A), c.X)"},
		{"bfloat16(a ** 0.5)", "float", "nn.RoundBfloat16(math.Pow(float64(c.A), 0.5))"},
		{`s[a % max(len(s), 1)] == "L"`, "bool", `nn.CharAt(c.S, c.A%max(len(c.S), 1)) == "L"`},
		{`layers("full")`, "strings", "nn.PerLayer(c.N, func(i int) string {\n\treturn \"full\"\n})"},
		{"layers(i % 2 == 0)", "ints", "nn.PerLayer(c.N, func(i int) int {\n\treturn nn.Btoi(i%2 == 0)\n})"},
	} {
		got, err := compile(c.in, testScope())
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if code := fmt.Sprintf("%#v", got.code); string(got.t) != c.t || code != c.want {
			t.Errorf("%s: %s %s; want %s %s", c.in, got.t, code, c.t, c.want)
		}
	}
	perLayer := testScope()
	perLayer.perLayer = true
	if got, err := compile(`kinds[i] == "sliding"`, perLayer); err != nil || fmt.Sprintf("%#v", got.code) != `c.Kinds[i] == "sliding"` {
		t.Errorf("per-layer index: %v %v", got, err)
	}
	for in, want := range map[string]string{
		"a // c":        "the divisor of // must be a positive literal or a key with min: 1",
		"a // 0":        "the divisor of // must be a positive literal or a key with min: 1",
		"x // b":        "// needs integers, got float and int",
		"a + on":        "+ does not apply to int and bool",
		"s < s":         "",
		"on < off":      "< does not apply to bool and bool",
		"nope":          `unknown name "nope"`,
		"i":             "i (the layer index) only means something in a per-layer expression",
		"kinds[i]":      "lists can only be indexed by i, the layer index, in a per-layer expression, or by an int literal where their length is one",
		"list[0]":       "only lists of a fixed length (length: an int literal) can be indexed by a literal",
		"limits[2]":     "index 2 is outside a list of 2 entries",
		"limits[a]":     "lists can only be indexed by i, the layer index, in a per-layer expression, or by an int literal where their length is one",
		"mean(a, b)":    "unknown function mean (want int, float, sqrt, log, min, max, round, bfloat16, if, len, count, indices, last_index, at or layers)",
		"at(kinds, x)":  "at does not take (strings, float)",
		"if(a, a, b)":   "if's condition is a bool, got int",
		"if(on, a, s)":  "if's values are int and string, want one type",
		"round(s)":      "round does not take (string)",
		"a % max(a, 0)": "the divisor of % must be a positive literal or a key with min: 1",
		"max(a, on)":    "max does not take (int, bool)",
		"s[x]":          "a string's index is an int, got float",
		"sqrt(s)":       "sqrt does not take (string)",
		"a +":           "unexpected end",
		"a b":           `unexpected "b" at column 3`,
		`"open`:         "unterminated string at column 1",
		"a $ b":         `unexpected '$' at column 3`,
		"layers(kinds)": "layers(...) makes lists of numbers or strings, not strings",
	} {
		_, err := compile(in, testScope())
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", in, err)
		case want != "" && (err == nil || err.Error() != want):
			t.Errorf("%s: %v; want %s", in, err, want)
		}
	}
}

func TestGoName(t *testing.T) {
	for in, want := range map[string]string{"self_attn": "SelfAttn", "lm_head": "LMHead", "qkv_proj": "QKVProj",
		"rms_norm_eps": "RMSNormEps", "c_fc": "CFC", "mlp_bias": "MLPBias", "post_mlp_layernorm": "PostMLPLayernorm"} {
		if got := goName(in); got != want {
			t.Errorf("goName(%s) = %s, want %s", in, got, want)
		}
	}
}
