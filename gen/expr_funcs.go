package gen

import (
	"fmt"
	"strconv"

	"github.com/dave/jennifer/jen"
)

// The expression language's functions: min and max, round (to the nearest
// integer, ties to even, as Python's round), a float rounded to bfloat16,
// a conditional if(c, a, b), and a string's characters (exaone4's sliding_window_pattern,
// "LLLG", read at layer i % its length).

// numberFunc checks min(x, y), max(x, y) (ints if both are, else floats)
// and bfloat16(x) (x rounded to bfloat16's precision, as mx.array(x,
// mx.bfloat16) rounds it).
func (sc *scope) numberFunc(fn string, args []*typed) (*typed, error) {
	r := refs(args...)
	if fn == "round" {
		if len(args) != 1 {
			return nil, fmt.Errorf("round takes 1 argument(s), got %d", len(args))
		}
		if !numeric(args[0].t) {
			return nil, fmt.Errorf("round does not take (%s)", args[0].t)
		}
		return atom(TInt, jen.Qual(nnPkg, "Round").Call(asFloat(args[0]).code), r), nil
	}
	if fn == "bfloat16" {
		if len(args) != 1 {
			return nil, fmt.Errorf("bfloat16 takes 1 argument(s), got %d", len(args))
		}
		if !numeric(args[0].t) {
			return nil, fmt.Errorf("bfloat16 does not take (%s)", args[0].t)
		}
		return atom(TFloat, jen.Qual(nnPkg, "RoundBfloat16").Call(asFloat(args[0]).code), r), nil
	}
	if len(args) != 2 {
		return nil, fmt.Errorf("%s takes 2 argument(s), got %d", fn, len(args))
	}
	x, y := args[0], args[1]
	switch {
	case x.t == TInt && y.t == TInt:
		return atom(TInt, jen.Id(fn).Call(x.code, y.code), r), nil
	case numeric(x.t) && numeric(y.t):
		return atom(TFloat, jen.Id(fn).Call(asFloat(x).code, asFloat(y).code), r), nil
	}
	return nil, fmt.Errorf("%s does not take (%s, %s)", fn, x.t, y.t)
}

// atLeastOne: max(x, k) with k a positive integer literal is a divisor
// that is never zero.
func atLeastOne(n *callExpr) bool {
	if n.fn != "max" || len(n.args) != 2 {
		return false
	}
	for _, a := range n.args {
		if l, ok := a.(*numLit); ok && l.isInt {
			if v, err := strconv.ParseInt(l.text, 10, 64); err == nil && v > 0 {
				return true
			}
		}
	}
	return false
}

// charAt checks s[k]: the character of a string at an integer index, itself
// a string, or "" where k is outside the string (so that an empty pattern
// reads as no pattern instead of failing).
func (sc *scope) charAt(s *typed, index node) (*typed, error) {
	k, err := sc.check(index)
	if err != nil {
		return nil, err
	}
	if k.t != TInt {
		return nil, fmt.Errorf("a string's index is an int, got %s", k.t)
	}
	return atom(TString, jen.Qual(nnPkg, "CharAt").Call(s.code, k.code), refs(s, k)), nil
}

// cond checks if(c, a, b): a where c holds, else b. Both are evaluated (each
// expression is total), so it picks a value rather than guarding one.
func (sc *scope) cond(args []*typed) (*typed, error) {
	if len(args) != 3 {
		return nil, fmt.Errorf("if takes 3 argument(s), got %d", len(args))
	}
	c, x, y := args[0], args[1], args[2]
	if c.t != TBool {
		return nil, fmt.Errorf("if's condition is a bool, got %s", c.t)
	}
	t := x.t
	switch {
	case x.t == y.t:
	case numeric(x.t) && numeric(y.t):
		t, x, y = TFloat, asFloat(x), asFloat(y)
	default:
		return nil, fmt.Errorf("if's values are %s and %s, want one type", x.t, y.t)
	}
	return atom(t, jen.Qual(nnPkg, "If").Call(c.code, x.code, y.code), refs(c, x, y)), nil
}
