package gen

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/dave/jennifer/jen"
)

// Expr is an expression of the descriptor language: config keys and
// derived values by name, literals, arithmetic, comparisons and a few
// functions (see descriptors/README.md).
type Expr struct {
	Text string
	Pos  Pos
}

// Literal is a default value as written (a YAML scalar or list).
type Literal struct {
	V any
}

// Type is the type of a config value or an expression.
type Type string

const (
	TInt     Type = "int"
	TFloat   Type = "float"
	TBool    Type = "bool"
	TString  Type = "string"
	TInts    Type = "ints"
	TFloats  Type = "floats"
	TStrings Type = "strings"
	TRope    Type = "rope_scaling"
	// TBools is a list of true and false (read only from a config; a
	// layers(...) of conditions makes ints).
	TBools Type = "bools"
)

func (Type) values() []string {
	return []string{"int", "float", "bool", "string", "ints", "floats", "strings", "rope_scaling", "bools"}
}

// elem is the entry type of a list type ("" for others).
func (t Type) elem() Type {
	switch t {
	case TInts:
		return TInt
	case TFloats:
		return TFloat
	case TStrings:
		return TString
	case TBools:
		return TBool
	}
	return ""
}

func listOf(t Type) Type {
	switch t {
	case TInt, TBool:
		return TInts
	case TFloat:
		return TFloats
	case TString:
		return TStrings
	}
	return ""
}

// goType is the Go type a value of t has in generated code.
func (t Type) goType() *jen.Statement {
	switch t {
	case TInt:
		return jen.Int()
	case TFloat:
		return jen.Float64()
	case TBool:
		return jen.Bool()
	case TString:
		return jen.String()
	case TInts:
		return jen.Index().Int()
	case TFloats:
		return jen.Index().Float64()
	case TStrings:
		return jen.Index().String()
	case TBools:
		return jen.Index().Bool()
	case TRope:
		return jen.Op("*").Qual(nnPkg, "RopeScaling")
	}
	panic("gen: no Go type for " + string(t))
}

func numeric(t Type) bool { return t == TInt || t == TFloat }

// ---- syntax ----

type node interface{ pos() int }

type (
	numLit struct {
		at    int
		text  string
		isInt bool
	}
	strLit struct {
		at int
		s  string
	}
	boolLit struct {
		at int
		b  bool
	}
	ident struct {
		at   int
		name string
	}
	unaryOp struct {
		at int
		op string
		x  node
	}
	binaryOp struct {
		at   int
		op   string
		x, y node
	}
	callExpr struct {
		at   int
		fn   string
		args []node
	}
	indexExpr struct {
		at   int
		x, i node
	}
)

func (n *numLit) pos() int    { return n.at }
func (n *strLit) pos() int    { return n.at }
func (n *boolLit) pos() int   { return n.at }
func (n *ident) pos() int     { return n.at }
func (n *unaryOp) pos() int   { return n.at }
func (n *binaryOp) pos() int  { return n.at }
func (n *callExpr) pos() int  { return n.at }
func (n *indexExpr) pos() int { return n.at }

type exprToken struct {
	kind string // "num", "str", "id", "op", "eof"
	text string
	at   int
}

func lex(s string) ([]exprToken, error) {
	var out []exprToken
	ops := []string{"**", "//", "==", "!=", "<=", ">=", "&&", "||", "+", "-", "*", "/", "%", "<", ">", "!", "(", ")", "[", "]", ","}
	for i := 0; i < len(s); {
		c := rune(s[i])
		switch {
		case c == ' ' || c == '\t':
			i++
		case unicode.IsDigit(c) || (c == '.' && i+1 < len(s) && unicode.IsDigit(rune(s[i+1]))):
			j := i
			for j < len(s) && (unicode.IsDigit(rune(s[j])) || s[j] == '.' || s[j] == 'e' || s[j] == 'E' ||
				((s[j] == '-' || s[j] == '+') && j > i && (s[j-1] == 'e' || s[j-1] == 'E'))) {
				j++
			}
			out = append(out, exprToken{"num", s[i:j], i})
			i = j
		case unicode.IsLetter(c) || c == '_':
			j := i
			for j < len(s) && (unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j])) || s[j] == '_') {
				j++
			}
			out = append(out, exprToken{"id", s[i:j], i})
			i = j
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				j++
			}
			if j == len(s) {
				return nil, fmt.Errorf("unterminated string at column %d", i+1)
			}
			out = append(out, exprToken{"str", s[i+1 : j], i})
			i = j + 1
		default:
			matched := false
			for _, op := range ops {
				if strings.HasPrefix(s[i:], op) {
					out = append(out, exprToken{"op", op, i})
					i += len(op)
					matched = true
					break
				}
			}
			if !matched {
				return nil, fmt.Errorf("unexpected %q at column %d", c, i+1)
			}
		}
	}
	return append(out, exprToken{"eof", "", len(s)}), nil
}

type exprParser struct {
	toks []exprToken
	i    int
}

func (p *exprParser) peek() exprToken { return p.toks[p.i] }
func (p *exprParser) next() exprToken { t := p.toks[p.i]; p.i++; return t }

var precedence = map[string]int{
	"||": 1, "&&": 2,
	"==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
	"+": 4, "-": 4,
	"*": 5, "/": 5, "//": 5, "%": 5,
}

// parseExpr parses the text of e.
func parseExpr(text string) (node, error) {
	toks, err := lex(text)
	if err != nil {
		return nil, err
	}
	p := &exprParser{toks: toks}
	n, err := p.binary(1)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != "eof" {
		return nil, fmt.Errorf("unexpected %q at column %d", t.text, t.at+1)
	}
	return n, nil
}

func (p *exprParser) binary(min int) (node, error) {
	x, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		prec, ok := precedence[t.text]
		if t.kind != "op" || !ok || prec < min {
			return x, nil
		}
		p.next()
		y, err := p.binary(prec + 1)
		if err != nil {
			return nil, err
		}
		x = &binaryOp{at: t.at, op: t.text, x: x, y: y}
	}
}

func (p *exprParser) unary() (node, error) {
	t := p.peek()
	if t.kind == "op" && (t.text == "-" || t.text == "!") {
		p.next()
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &unaryOp{at: t.at, op: t.text, x: x}, nil
	}
	return p.power()
}

// power binds tighter than a unary minus on its left, and takes one on its
// right: -x ** 2 is -(x ** 2), x ** -0.5 is allowed.
func (p *exprParser) power() (node, error) {
	x, err := p.postfix()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind == "op" && t.text == "**" {
		p.next()
		y, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &binaryOp{at: t.at, op: "**", x: x, y: y}, nil
	}
	return x, nil
}

func (p *exprParser) postfix() (node, error) {
	x, err := p.primary()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == "op" && p.peek().text == "[" {
		t := p.next()
		i, err := p.binary(1)
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.text != "]" {
			return nil, fmt.Errorf("want ] at column %d", c.at+1)
		}
		x = &indexExpr{at: t.at, x: x, i: i}
	}
	return x, nil
}

func (p *exprParser) primary() (node, error) {
	t := p.next()
	switch t.kind {
	case "num":
		isInt := !strings.ContainsAny(t.text, ".eE")
		if _, err := strconv.ParseFloat(t.text, 64); err != nil {
			return nil, fmt.Errorf("bad number %q at column %d", t.text, t.at+1)
		}
		return &numLit{at: t.at, text: t.text, isInt: isInt}, nil
	case "str":
		return &strLit{at: t.at, s: t.text}, nil
	case "id":
		switch t.text {
		case "true", "false":
			return &boolLit{at: t.at, b: t.text == "true"}, nil
		}
		if p.peek().text == "(" && p.peek().kind == "op" {
			p.next()
			c := &callExpr{at: t.at, fn: t.text}
			for p.peek().text != ")" {
				a, err := p.binary(1)
				if err != nil {
					return nil, err
				}
				c.args = append(c.args, a)
				if p.peek().text == "," {
					p.next()
				} else if p.peek().text != ")" {
					return nil, fmt.Errorf("want , or ) at column %d", p.peek().at+1)
				}
			}
			p.next()
			return c, nil
		}
		return &ident{at: t.at, name: t.text}, nil
	case "op":
		if t.text == "(" {
			x, err := p.binary(1)
			if err != nil {
				return nil, err
			}
			if c := p.next(); c.text != ")" {
				return nil, fmt.Errorf("want ) at column %d", c.at+1)
			}
			return x, nil
		}
	case "eof":
		return nil, fmt.Errorf("unexpected end")
	}
	return nil, fmt.Errorf("unexpected %q at column %d", t.text, t.at+1)
}

// ---- meaning ----

// scope is what names mean where an expression is used.
type scope struct {
	// names are the config keys and derived values, with their types.
	names map[string]Type
	// code spells a name in Go.
	code func(name string) jen.Code
	// perLayer allows i, the layer index, and indexing lists by it.
	perLayer bool
	// unchecked: the lists' lengths are not checked yet (ParseConfig's
	// derivations run before its length checks), so indexing by i reads
	// the zero value past a list's end instead of failing.
	unchecked bool
	// layers spells the layer count, for layers(...).
	layers jen.Code
	// positive reports names validated to be at least 1 (divisors).
	positive func(name string) bool
	// indexable reports lists validated to hold one entry per layer.
	indexable func(name string) bool
	// fixed is the length of a list validated to hold exactly that many
	// entries (length: an int literal), 0 for any other.
	fixed func(name string) int
}

// typed is a checked expression: its type, how to spell it in Go, the
// precedence of its outermost Go operator (6 for operands), and the names
// it reads.
type typed struct {
	t    Type
	code *jen.Statement
	prec int
	refs []string
	ilit *int // the value of an integer literal
}

// goPrec is Go's precedence of a binary operator.
var goPrec = map[string]int{"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
	"+": 4, "-": 4, "*": 5, "/": 5, "%": 5}

// wrap spells x as an operand of an operator of precedence min.
func wrap(x *typed, min int) *jen.Statement {
	if x.prec < min {
		return jen.Parens(x.code)
	}
	return x.code
}

// op spells x op y, parenthesizing only what Go needs.
func op(t Type, x *typed, o string, y *typed) *typed {
	p := goPrec[o]
	return &typed{t: t, code: wrap(x, p).Clone().Op(o).Add(wrap(y, p+1)), prec: p, refs: refs(x, y)}
}

// atom is an operand: a literal, a name, a call.
func atom(t Type, code *jen.Statement, r []string) *typed {
	return &typed{t: t, code: code, prec: 6, refs: r}
}

// compile checks text in sc and spells it in Go.
func compile(text string, sc *scope) (*typed, error) {
	n, err := parseExpr(text)
	if err != nil {
		return nil, err
	}
	return sc.check(n)
}

func (sc *scope) check(n node) (*typed, error) {
	switch n := n.(type) {
	case *numLit:
		if n.isInt {
			v, _ := strconv.Atoi(n.text)
			x := atom(TInt, jen.Lit(v), nil)
			x.ilit = &v
			return x, nil
		}
		v, _ := strconv.ParseFloat(n.text, 64)
		return atom(TFloat, jen.Lit(v), nil), nil
	case *strLit:
		return atom(TString, jen.Lit(n.s), nil), nil
	case *boolLit:
		return atom(TBool, jen.Lit(n.b), nil), nil
	case *ident:
		if n.name == "i" && sc.perLayer {
			return atom(TInt, jen.Id("i"), nil), nil
		}
		t, ok := sc.names[n.name]
		if !ok && n.name == "inf" {
			// infinity (an unclipped bound: Falcon-H1's time steps)
			return atom(TFloat, jen.Qual("math", "Inf").Call(jen.Lit(1)), nil), nil
		}
		if !ok {
			if n.name == "i" {
				return nil, fmt.Errorf("i (the layer index) only means something in a per-layer expression")
			}
			return nil, fmt.Errorf("unknown name %q", n.name)
		}
		return atom(t, jen.Add(sc.code(n.name)), []string{n.name}), nil
	case *unaryOp:
		x, err := sc.check(n.x)
		if err != nil {
			return nil, err
		}
		switch {
		case n.op == "-" && numeric(x.t):
			return atom(x.t, jen.Op("-").Add(wrap(x, 6)), x.refs), nil
		case n.op == "!" && x.t == TBool:
			return atom(TBool, jen.Op("!").Add(wrap(x, 6)), x.refs), nil
		}
		return nil, fmt.Errorf("%s does not apply to %s", n.op, x.t)
	case *binaryOp:
		return sc.binary(n)
	case *callExpr:
		return sc.call(n)
	case *indexExpr:
		x, err := sc.check(n.x)
		if err != nil {
			return nil, err
		}
		if x.t == TString {
			return sc.charAt(x, n.i)
		}
		if x.t.elem() == "" {
			return nil, fmt.Errorf("%s is not a list", x.t)
		}
		if k, err := sc.check(n.i); err == nil && k.ilit != nil {
			return sc.fixedEntry(n.x, x, *k.ilit)
		}
		id, isID := n.i.(*ident)
		if !sc.perLayer || !isID || id.name != "i" {
			return nil, fmt.Errorf("lists can only be indexed by i, the layer index, in a per-layer expression, or by an int literal where their length is one")
		}
		if name, ok := n.x.(*ident); !ok || !sc.indexable(name.name) {
			return nil, fmt.Errorf("only lists with one entry per layer (length: the layer count) can be indexed by i")
		}
		if sc.unchecked {
			return atom(x.t.elem(), jen.Qual(nnPkg, "At").Call(x.code.Clone(), jen.Id("i")), x.refs), nil
		}
		return atom(x.t.elem(), x.code.Clone().Index(jen.Id("i")), x.refs), nil
	}
	return nil, fmt.Errorf("gen: unknown expression node %T", n)
}

// fixedEntry is entry k of a list of a fixed length (a key with length: an
// int literal): time_step_limit[0].
func (sc *scope) fixedEntry(list node, x *typed, k int) (*typed, error) {
	name, ok := list.(*ident)
	n := 0
	if ok && sc.fixed != nil {
		n = sc.fixed(name.name)
	}
	if n == 0 {
		return nil, fmt.Errorf("only lists of a fixed length (length: an int literal) can be indexed by a literal")
	}
	if k < 0 || k >= n {
		return nil, fmt.Errorf("index %d is outside a list of %d entries", k, n)
	}
	return atom(x.t.elem(), x.code.Clone().Index(jen.Lit(k)), x.refs), nil
}

func refs(parts ...*typed) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p.refs...)
	}
	return out
}

// asFloat is x as a float64.
func asFloat(x *typed) *typed {
	switch {
	case x.t == TFloat:
		return x
	case x.ilit != nil:
		return atom(TFloat, jen.Lit(float64(*x.ilit)), nil)
	}
	return atom(TFloat, jen.Float64().Call(x.code), x.refs)
}

func (sc *scope) binary(n *binaryOp) (*typed, error) {
	x, err := sc.check(n.x)
	if err != nil {
		return nil, err
	}
	y, err := sc.check(n.y)
	if err != nil {
		return nil, err
	}
	bad := func() error { return fmt.Errorf("%s does not apply to %s and %s", n.op, x.t, y.t) }
	switch n.op {
	case "&&", "||":
		if x.t != TBool || y.t != TBool {
			return nil, bad()
		}
		return op(TBool, x, n.op, y), nil
	case "==", "!=", "<", "<=", ">", ">=":
		switch {
		case x.t == y.t && (x.t == TInt || x.t == TFloat || x.t == TString):
			return op(TBool, x, n.op, y), nil
		case x.t == TBool && y.t == TBool && (n.op == "==" || n.op == "!="):
			return op(TBool, x, n.op, y), nil
		case numeric(x.t) && numeric(y.t):
			return op(TBool, asFloat(x), n.op, asFloat(y)), nil
		}
		return nil, bad()
	case "+", "-", "*":
		switch {
		case x.t == TInt && y.t == TInt:
			return op(TInt, x, n.op, y), nil
		case numeric(x.t) && numeric(y.t):
			return op(TFloat, asFloat(x), n.op, asFloat(y)), nil
		}
		return nil, bad()
	case "/":
		if !numeric(x.t) || !numeric(y.t) {
			return nil, bad()
		}
		return op(TFloat, asFloat(x), "/", asFloat(y)), nil
	case "//", "%":
		if x.t != TInt || y.t != TInt {
			return nil, fmt.Errorf("%s needs integers, got %s and %s", n.op, x.t, y.t)
		}
		if !sc.safeDivisor(n.y) {
			return nil, fmt.Errorf("the divisor of %s must be a positive literal or a key with min: 1", n.op)
		}
		if n.op == "//" {
			return op(TInt, x, "/", y), nil
		}
		return op(TInt, x, "%", y), nil
	case "**":
		if !numeric(x.t) || !numeric(y.t) {
			return nil, bad()
		}
		return atom(TFloat, jen.Qual("math", "Pow").Call(asFloat(x).code, asFloat(y).code), refs(x, y)), nil
	}
	return nil, fmt.Errorf("unknown operator %s", n.op)
}

// safeDivisor: integer division and remainder never divide by zero.
func (sc *scope) safeDivisor(n node) bool {
	switch n := n.(type) {
	case *numLit:
		v, err := strconv.ParseInt(n.text, 10, 64)
		return n.isInt && err == nil && v > 0
	case *ident:
		return sc.positive != nil && sc.positive(n.name)
	case *callExpr:
		return atLeastOne(n)
	}
	return false
}

func (sc *scope) call(n *callExpr) (*typed, error) {
	want := func(k int) error {
		if len(n.args) != k {
			return fmt.Errorf("%s takes %d argument(s), got %d", n.fn, k, len(n.args))
		}
		return nil
	}
	if n.fn == "layers" {
		if err := want(1); err != nil {
			return nil, err
		}
		if sc.perLayer {
			return nil, fmt.Errorf("layers(...) cannot nest in a per-layer expression")
		}
		inner := *sc
		inner.perLayer = true
		x, err := inner.check(n.args[0])
		if err != nil {
			return nil, err
		}
		lt := listOf(x.t)
		if lt == "" {
			return nil, fmt.Errorf("layers(...) makes lists of numbers or strings, not %s", x.t)
		}
		body := x.code
		if x.t == TBool {
			body = jen.Qual(nnPkg, "Btoi").Call(x.code)
		}
		fn := jen.Func().Params(jen.Id("i").Int()).Add(lt.elem().goType()).Block(jen.Return(body))
		return atom(lt, jen.Qual(nnPkg, "PerLayer").Call(sc.layers, fn), x.refs), nil
	}
	var args []*typed
	for _, a := range n.args {
		x, err := sc.check(a)
		if err != nil {
			return nil, err
		}
		args = append(args, x)
	}
	r := refs(args...)
	switch n.fn {
	case "int":
		if err := want(1); err != nil {
			return nil, err
		}
		switch args[0].t {
		case TInt:
			return args[0], nil
		case TFloat:
			return atom(TInt, jen.Int().Call(args[0].code), r), nil
		case TBool:
			return atom(TInt, jen.Qual(nnPkg, "Btoi").Call(args[0].code), r), nil
		}
	case "float":
		if err := want(1); err != nil {
			return nil, err
		}
		if numeric(args[0].t) {
			return asFloat(args[0]), nil
		}
	case "sqrt":
		if err := want(1); err != nil {
			return nil, err
		}
		if numeric(args[0].t) {
			return atom(TFloat, jen.Qual("math", "Sqrt").Call(asFloat(args[0]).code), r), nil
		}
	case "log":
		if err := want(1); err != nil {
			return nil, err
		}
		if numeric(args[0].t) {
			return atom(TFloat, jen.Qual("math", "Log").Call(asFloat(args[0]).code), r), nil
		}
	case "len":
		if err := want(1); err != nil {
			return nil, err
		}
		if args[0].t.elem() != "" || args[0].t == TString {
			return atom(TInt, jen.Len(args[0].code), r), nil
		}
	case "count":
		if err := want(2); err != nil {
			return nil, err
		}
		if e := args[0].t.elem(); e != "" && (e == args[1].t) {
			return atom(TInt, jen.Qual(nnPkg, "Count").Call(args[0].code, args[1].code), r), nil
		}
	case "indices":
		if err := want(2); err != nil {
			return nil, err
		}
		if e := args[0].t.elem(); e != "" && (e == args[1].t) {
			return atom(TInts, jen.Qual(nnPkg, "Indices").Call(args[0].code, args[1].code), r), nil
		}
	case "last_index":
		if err := want(3); err != nil {
			return nil, err
		}
		if e := args[0].t.elem(); e != "" && e == args[1].t && args[2].t == TInt {
			return atom(TInt, jen.Qual(nnPkg, "LastIndex").Call(args[0].code, args[1].code, args[2].code), r), nil
		}
	case "at":
		if err := want(2); err != nil {
			return nil, err
		}
		if e := args[0].t.elem(); e != "" && e != TBool && args[1].t == TInt {
			return atom(e, jen.Qual(nnPkg, "At").Call(args[0].code, args[1].code), r), nil
		}
	case "min", "max", "bfloat16", "round":
		return sc.numberFunc(n.fn, args)
	case "if":
		return sc.cond(args)
	default:
		return nil, fmt.Errorf("unknown function %s (want int, float, sqrt, log, min, max, round, bfloat16, if, len, count, indices, last_index, at or layers)", n.fn)
	}
	var ts []string
	for _, a := range args {
		ts = append(ts, string(a.t))
	}
	return nil, fmt.Errorf("%s does not take (%s)", n.fn, strings.Join(ts, ", "))
}

// literalOf reports whether text is a bare literal and its Go value.
func literalOf(text string) (any, bool) {
	n, err := parseExpr(text)
	if err != nil {
		return nil, false
	}
	switch n := n.(type) {
	case *boolLit:
		return n.b, true
	case *numLit:
		if n.isInt {
			v, _ := strconv.Atoi(n.text)
			return v, true
		}
		v, _ := strconv.ParseFloat(n.text, 64)
		return v, true
	case *strLit:
		return n.s, true
	}
	return nil, false
}
