package reply

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The formats that write a call as a function call of a programming
// language: Python's, or Gemma's own.

// pythonic is LFM2's format: a Python list of calls with keyword
// arguments.
//
//	<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>
var pythonic = &format{
	name:   "pythonic",
	starts: []string{"<|tool_call_start|>"},
	end:    "<|tool_call_end|>",
	parse:  parsePythonic,
	detect: func(in Inputs) bool {
		return templateHas(in, "<|tool_list_start|>") || templateHas(in, "<|tool_call_start|>")
	},
	// LFM2 conversions may have the markers as tokens without naming them
	// in the template.
	vocab: func(in Inputs) bool { return vocabHas(in, "<|tool_call_start|>", "<|tool_call_end|>") },
	grammar: func(g *grammar, c callShape) error {
		l, err := g.callList(c, ", ", func(t Tool) (string, error) {
			ps := g.params(t, ", ", func(p param, defs string) string {
				return larkString(p.name+"=") + " " + g.jsonValue(p.schema, defs)
			}, func() string {
				return paramName + " " + larkString("=") + " " + g.jsonValue(nil, "")
			})
			return larkString(t.Name+"(") + " " + ps + " " + larkString(")"), nil
		})
		if err != nil {
			return err
		}
		g.add("calls", g.lit("<|tool_call_start|>")+" "+larkString("[")+" "+l+" "+larkString("]")+" "+g.lit("<|tool_call_end|>"))
		return nil
	},
}

func parsePythonic(body string, _ toolSet) ([]ToolCall, string, error) {
	r := &pyReader{scanner: scanner{s: body}}
	r.space()
	list := r.eat("[")
	var calls []ToolCall
	for {
		r.space()
		if list && r.eat("]") {
			break
		}
		if len(calls) > 0 {
			if !r.eat(",") {
				if list {
					return nil, body, errors.New("calls not apart by commas")
				}
				break
			}
			r.space()
			if list && r.eat("]") {
				break
			}
		}
		c, err := r.call()
		if err != nil {
			return nil, body, err
		}
		calls = append(calls, c)
		if !list {
			r.space()
			if r.i == len(r.s) {
				break
			}
		}
	}
	r.space()
	if r.i != len(r.s) {
		return nil, body, errors.New("text after the calls")
	}
	return calls, "", nil
}

// scanner is a place in a text the call readers below read.
type scanner struct {
	s string
	i int
}

// space skips whitespace.
func (r *scanner) space() {
	for r.i < len(r.s) && strings.IndexByte(spaces, r.s[r.i]) >= 0 {
		r.i++
	}
}

// eat moves past tok where the text goes on with it.
func (r *scanner) eat(tok string) bool {
	if strings.HasPrefix(r.s[r.i:], tok) {
		r.i += len(tok)
		return true
	}
	return false
}

// pyReader reads Python: calls with keyword arguments, and literals,
// which it writes as JSON.
type pyReader struct {
	scanner
	depth int
}

var errPython = errors.New("not a Python call")

// ident reads a name: letters, digits and '_', not starting with a digit.
func (r *pyReader) ident() string {
	start := r.i
	for r.i < len(r.s) {
		c, n := utf8.DecodeRuneInString(r.s[r.i:])
		if c == '_' || unicode.IsLetter(c) || (r.i > start && unicode.IsDigit(c)) {
			r.i += n
			continue
		}
		break
	}
	return r.s[start:r.i]
}

// call reads name(key=value, ...); the name may be dotted.
func (r *pyReader) call() (ToolCall, error) {
	name := r.ident()
	for name != "" && r.eat(".") {
		part := r.ident()
		if part == "" {
			return ToolCall{}, errPython
		}
		name += "." + part
	}
	r.space()
	if name == "" || !r.eat("(") {
		return ToolCall{}, errPython
	}
	var args object
	for {
		r.space()
		if r.eat(")") {
			break
		}
		if len(args.keys) > 0 {
			if !r.eat(",") {
				return ToolCall{}, errPython
			}
			r.space()
			if r.eat(")") {
				break
			}
		}
		key := r.ident()
		r.space()
		if key == "" || !r.eat("=") {
			return ToolCall{}, errPython
		}
		r.space()
		v, err := r.value()
		if err != nil {
			return ToolCall{}, err
		}
		args.set(key, v)
	}
	return ToolCall{Name: name, Arguments: args.String()}, nil
}

// value reads an argument's value: a literal, or a bare word, which is
// taken for a string.
func (r *pyReader) value() (string, error) {
	start := r.i
	v, err := r.literal()
	if err == nil {
		return v, nil
	}
	r.i = start
	w := r.ident()
	if w == "" {
		return "", err
	}
	return jsonString(w), nil
}

// literal reads a Python literal (strings, numbers, True, False, None,
// lists, tuples, dicts; JSON's true, false and null too) as JSON.
func (r *pyReader) literal() (string, error) {
	if r.depth > 64 {
		return "", errPython
	}
	r.space()
	if r.i >= len(r.s) {
		return "", errPython
	}
	switch c := r.s[r.i]; {
	case c == '"' || c == '\'':
		s, err := r.str()
		if err != nil {
			return "", err
		}
		return jsonString(s), nil
	case c == '[' || c == '(':
		closer := "]"
		if c == '(' {
			closer = ")"
		}
		r.i++
		r.depth++
		defer func() { r.depth-- }()
		var items []string
		for {
			r.space()
			if r.eat(closer) {
				return "[" + strings.Join(items, ",") + "]", nil
			}
			if len(items) > 0 {
				if !r.eat(",") {
					return "", errPython
				}
				r.space()
				if r.eat(closer) {
					return "[" + strings.Join(items, ",") + "]", nil
				}
			}
			v, err := r.literal()
			if err != nil {
				return "", err
			}
			items = append(items, v)
		}
	case c == '{':
		r.i++
		r.depth++
		defer func() { r.depth-- }()
		var o object
		for {
			r.space()
			if r.eat("}") {
				return o.String(), nil
			}
			if len(o.keys) > 0 {
				if !r.eat(",") {
					return "", errPython
				}
				r.space()
				if r.eat("}") {
					return o.String(), nil
				}
			}
			k, err := r.literal()
			if err != nil {
				return "", err
			}
			r.space()
			if !r.eat(":") {
				return "", errPython
			}
			v, err := r.literal()
			if err != nil {
				return "", err
			}
			key := k
			if strings.HasPrefix(k, `"`) {
				key = jsonUnquote(k)
			}
			o.set(key, v)
		}
	case c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9'):
		return r.number()
	}
	start := r.i
	switch w := r.ident(); w {
	case "True", "true":
		return "true", nil
	case "False", "false":
		return "false", nil
	case "None", "null":
		return "null", nil
	}
	r.i = start
	return "", errPython
}

// jsonUnquote reads a JSON string's text.
func jsonUnquote(s string) string {
	var u string
	if json.Unmarshal([]byte(s), &u) != nil {
		return strings.Trim(s, `"`)
	}
	return u
}

// number reads a Python int or float as a JSON number.
func (r *pyReader) number() (string, error) {
	start := r.i
	if r.s[r.i] == '-' || r.s[r.i] == '+' {
		r.i++
	}
	for r.i < len(r.s) && strings.IndexByte("0123456789._eE", r.s[r.i]) >= 0 {
		if (r.s[r.i] == 'e' || r.s[r.i] == 'E') && r.i+1 < len(r.s) && (r.s[r.i+1] == '-' || r.s[r.i+1] == '+') {
			r.i++
		}
		r.i++
	}
	t := strings.ReplaceAll(strings.TrimPrefix(r.s[start:r.i], "+"), "_", "")
	if i, err := strconv.ParseInt(t, 10, 64); err == nil {
		return strconv.FormatInt(i, 10), nil
	}
	if isJSONNumber(t) {
		return t, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", errPython
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}

// str reads a quoted string, triple-quoted ones too, with Python's
// escapes.
func (r *pyReader) str() (string, error) {
	q := r.s[r.i : r.i+1]
	if strings.HasPrefix(r.s[r.i:], q+q+q) {
		q = q + q + q
	}
	r.i += len(q)
	var b strings.Builder
	for r.i < len(r.s) {
		if strings.HasPrefix(r.s[r.i:], q) {
			r.i += len(q)
			return b.String(), nil
		}
		c := r.s[r.i]
		if c == '\n' && len(q) == 1 {
			return "", errPython
		}
		if c != '\\' {
			_, n := utf8.DecodeRuneInString(r.s[r.i:])
			b.WriteString(r.s[r.i : r.i+n])
			r.i += n
			continue
		}
		if r.i+1 >= len(r.s) {
			return "", errPython
		}
		e := r.s[r.i+1]
		r.i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if r.i+n > len(r.s) {
				return "", errPython
			}
			v, err := strconv.ParseUint(r.s[r.i:r.i+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", errPython
			}
			b.WriteRune(rune(v))
			r.i += n
		default:
			b.WriteByte('\\')
			_, n := utf8.DecodeRuneInString(r.s[r.i-1:])
			b.WriteString(r.s[r.i-1 : r.i-1+n])
			r.i += n - 1
		}
	}
	return "", errPython
}

// gemmaCalls is the format of Gemma 4 and FunctionGemma: call:NAME{...},
// keys bare and strings between a delimiter of their own.
//
//	<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>
//	<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>
type gemmaCalls struct{ quote string }

var (
	gemma4Syntax        = gemmaCalls{quote: `<|"|>`}
	functionGemmaSyntax = gemmaCalls{quote: "<escape>"}
)

var gemma4 = &format{
	name:    "gemma4",
	starts:  []string{"<|tool_call>"},
	end:     "<tool_call|>",
	parse:   gemma4Syntax.parse,
	detect:  func(in Inputs) bool { return templateHas(in, "<|tool_call>", "<tool_call|>") },
	grammar: gemma4Syntax.grammar("<|tool_call>", "<tool_call|>"),
}

var functionGemma = &format{
	name:    "function_gemma",
	starts:  []string{"<start_function_call>"},
	end:     "<end_function_call>",
	parse:   functionGemmaSyntax.parse,
	detect:  func(in Inputs) bool { return templateHas(in, "<start_function_call>") },
	grammar: functionGemmaSyntax.grammar("<start_function_call>", "<end_function_call>"),
}

func (gc gemmaCalls) parse(body string, _ toolSet) ([]ToolCall, string, error) {
	r := &gemmaReader{scanner: scanner{s: body}, quote: gc.quote}
	var calls []ToolCall
	for {
		r.space()
		if r.i == len(r.s) {
			break
		}
		if len(calls) > 0 && r.eat(",") {
			r.space()
		}
		if !r.eat("call:") {
			return nil, body, errors.New("not a call")
		}
		start := r.i
		for r.i < len(r.s) && (isWordByte(r.s[r.i]) || r.s[r.i] >= 0x80) {
			r.i++
		}
		name := r.s[start:r.i]
		if !validName(name) || r.i >= len(r.s) || r.s[r.i] != '{' {
			return nil, body, errors.New("a call without a name")
		}
		args, err := r.value()
		if err != nil {
			return nil, body, err
		}
		calls = append(calls, ToolCall{Name: name, Arguments: args})
	}
	return calls, "", nil
}

func isWordByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func (gc gemmaCalls) grammar(start, end string) func(g *grammar, c callShape) error {
	return func(g *grammar, c callShape) error {
		return g.calls(c, "", func(t Tool) (string, error) {
			ps := g.params(t, ",", func(p param, defs string) string {
				return larkString(p.name+":") + " " + gc.value(g, p, defs)
			}, func() string {
				return paramName + " " + larkString(":") + " " + g.lit(gc.quote) + " " + g.textUntil("text", gc.quote)
			})
			return g.lit(start+"call:"+t.Name+"{") + " " + ps + " " + g.lit("}"+end), nil
		})
	}
}

// value spells a parameter's value: a string between the delimiters,
// anything else as JSON.
func (gc gemmaCalls) value(g *grammar, p param, defs string) string {
	if isStringParam(p) {
		return g.lit(gc.quote) + " " + g.textValue(p, defs, gc.quote)
	}
	return g.jsonValue(p.schema, defs)
}

// gemmaReader reads Gemma's call syntax as JSON.
type gemmaReader struct {
	scanner
	quote string
	depth int
}

var errGemma = errors.New("not a Gemma call")

// value reads a value: a delimited string, a JSON string, an object or a
// list, or a bare word up to the next ',', '}' or ']' (JSON where it reads
// as a number, true, false or null; a string otherwise).
func (r *gemmaReader) value() (string, error) {
	if r.depth > 64 {
		return "", errGemma
	}
	r.space()
	if r.i >= len(r.s) {
		return "", errGemma
	}
	if r.eat(r.quote) {
		j := strings.Index(r.s[r.i:], r.quote)
		if j < 0 {
			return "", errGemma
		}
		v := r.s[r.i : r.i+j]
		r.i += j + len(r.quote)
		return jsonString(v), nil
	}
	switch r.s[r.i] {
	case '"':
		v, rest, err := firstJSON(r.s[r.i:])
		if err != nil || jsonKind(v) != "string" {
			return "", errGemma
		}
		r.i = len(r.s) - len(rest)
		return compactJSON(string(v)), nil
	case '{':
		r.i++
		r.depth++
		defer func() { r.depth-- }()
		var o object
		for {
			r.space()
			if r.eat("}") {
				return o.String(), nil
			}
			if len(o.keys) > 0 {
				if !r.eat(",") {
					return "", errGemma
				}
				r.space()
			}
			k, err := r.key()
			if err != nil {
				return "", err
			}
			v, err := r.value()
			if err != nil {
				return "", err
			}
			o.set(k, v)
		}
	case '[':
		r.i++
		r.depth++
		defer func() { r.depth-- }()
		var items []string
		for {
			r.space()
			if r.eat("]") {
				return "[" + strings.Join(items, ",") + "]", nil
			}
			if len(items) > 0 {
				if !r.eat(",") {
					return "", errGemma
				}
			}
			v, err := r.value()
			if err != nil {
				return "", err
			}
			items = append(items, v)
		}
	}
	start := r.i
	for r.i < len(r.s) && strings.IndexByte(",}]", r.s[r.i]) < 0 && !strings.HasPrefix(r.s[r.i:], r.quote) {
		r.i++
	}
	w := strings.TrimSpace(r.s[start:r.i])
	switch {
	case w == "":
		return "", errGemma
	case isJSONNumber(w), w == "true", w == "false", w == "null":
		return w, nil
	}
	return jsonString(w), nil
}

// key reads an object's key and the ':' after it: bare, delimited or a
// JSON string.
func (r *gemmaReader) key() (string, error) {
	r.space()
	var k string
	switch {
	case r.eat(r.quote):
		j := strings.Index(r.s[r.i:], r.quote)
		if j < 0 {
			return "", errGemma
		}
		k = r.s[r.i : r.i+j]
		r.i += j + len(r.quote)
	case r.i < len(r.s) && r.s[r.i] == '"':
		v, rest, err := firstJSON(r.s[r.i:])
		if err != nil || jsonKind(v) != "string" {
			return "", errGemma
		}
		r.i = len(r.s) - len(rest)
		k = jsonUnquote(string(v))
	default:
		j := strings.IndexByte(r.s[r.i:], ':')
		if j <= 0 {
			return "", errGemma
		}
		k = strings.TrimSpace(r.s[r.i : r.i+j])
		r.i += j
		if k == "" || strings.ContainsAny(k, "{}[],") {
			return "", errGemma
		}
	}
	r.space()
	if !r.eat(":") {
		return "", errGemma
	}
	return k, nil
}
