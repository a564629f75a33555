package constrain

import (
	"testing"
)

// FuzzGrammars: any JSON schema, regular expression, Lark or GBNF text
// compiles or fails with an error; a grammar that compiles gives a matcher
// whose first mask is computed without a crash (a Rust panic or abort
// would end the fuzzing process).
func FuzzGrammars(f *testing.F) {
	for _, seed := range []struct {
		kind uint8
		src  string
	}{
		{0, `{"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}}, "required": ["a"]}`},
		{0, `{"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "array", "items": {"$ref": "#"}}]}`},
		{0, `{"type": "wat"}`},
		{1, `[A-Z]{3}-[0-9]+`},
		{1, `(a|b)*c{2,}`},
		{2, `start: "x" %json {"type": "boolean"} | /[0-9]+/`},
		{3, `root ::= "a" rest` + "\n" + `rest ::= [b-d]* | "(" root ")"`},
		{3, `root ::= ((`},
	} {
		f.Add(seed.kind, seed.src)
	}
	f.Fuzz(func(t *testing.T, kind uint8, src string) {
		v := smolLM2(t).v
		var g *Grammar
		var err error
		switch kind % 4 {
		case 0:
			g, err = v.JSONSchema([]byte(src))
		case 1:
			g, err = v.Regex(src)
		case 2:
			g, err = v.Lark(src)
		default:
			g, err = v.GBNF(src)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an empty error", src)
			}
			return
		}
		defer g.Free()
		m, err := g.NewMatcher()
		if err != nil {
			return
		}
		defer m.Free()
		_ = m.Mask(make([]uint32, (v.Size()+31)/32))
	})
}
