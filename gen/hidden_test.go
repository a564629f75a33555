package gen

import (
	"go/ast"
	"testing"
)

// TestForwardIsHiddenThenHead: every generated Forward starts from Hidden,
// which ends at the final norm, and adds only the head (a projection, then
// a scale, divisor or soft cap of the logits), so that Hidden's states are
// exactly what Forward's head reads. An encoder's Forward fails its graph
// and returns (it has no token head), and its Hidden ends at the final
// norm only where the descriptor gives it one.
func TestForwardIsHiddenThenHead(t *testing.T) {
	s, err := Load("../descriptors", "descriptors")
	if err != nil {
		t.Fatal(err)
	}
	encoders := map[string]*Encoder{}
	for _, a := range s.Archs {
		if a.Encoder != nil {
			encoders[a.Dir()+"/forward.go"] = a.Encoder
		}
	}
	eachForward(t, func(p string, f *ast.File) {
		funcs := map[string]*ast.FuncDecl{}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok && star.X.(*ast.Ident).Name == "Model" {
					funcs[fd.Name.Name] = fd
				}
			}
		}
		fwd, hidden := funcs["Forward"], funcs["Hidden"]
		if fwd == nil || hidden == nil {
			t.Errorf("%s: Model lacks Forward or Hidden", p)
			return
		}
		body := hidden.Body.List
		ret, ok := body[len(body)-1].(*ast.ReturnStmt)
		if enc := encoders[p]; enc != nil {
			fails, okFail := fwd.Body.List[0].(*ast.ExprStmt)
			if len(fwd.Body.List) != 2 || !okFail || !callsMethod(fails.X, "Failf") {
				t.Errorf("%s: an encoder's Forward does not fail its graph and return", p)
			}
			_, okLast := body[len(body)-2].(*ast.RangeStmt)
			if !ok || ret.Results[0].(*ast.Ident).Name != "h" || enc.FinalNorm == okLast {
				t.Errorf("%s: Hidden does not end as the encoder's final norm (%v) says", p, enc.FinalNorm)
			}
			return
		}
		if first, ok := fwd.Body.List[0].(*ast.AssignStmt); !ok || !callsMethod(first.Rhs[0], "Hidden") {
			t.Errorf("%s: Forward does not start with Hidden", p)
		}
		ast.Inspect(fwd.Body, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.ForStmt, *ast.RangeStmt:
				t.Errorf("%s: Forward runs a loop of its own", p)
			case *ast.CallExpr:
				if callsMethod(x, "forward") {
					t.Errorf("%s: Forward runs a module beside Hidden", p)
				}
			}
			return true
		})
		norm, okNorm := body[len(body)-2].(*ast.AssignStmt)
		if !ok || !okNorm || ret.Results[0].(*ast.Ident).Name != "h" || !callsMethod(norm.Rhs[0], "Apply") {
			t.Errorf("%s: Hidden does not end with the final norm of h", p)
		}
	})
}

// callsMethod reports whether e is a call of a method named name.
func callsMethod(e ast.Expr, name string) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == name
}
