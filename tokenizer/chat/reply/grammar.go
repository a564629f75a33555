package reply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Grammar returns a grammar in llguidance's Lark dialect that forces a
// reply to be tool calls of this format: one call, or one or more when
// parallel is true; calls of the named tool only when name is not "";
// arguments that match each tool's parameters schema. With a reasoning
// block (reasoning not nil), one may come first, and whitespace after it;
// a Reasoning whose Start is "" is one the prompt left open, which the
// reply must close first.
//
// Markers that are special tokens of the vocabulary (Inputs.SpecialToken)
// are named by id, <[id]>; the rest are spelled. The error names the
// format where it cannot be expressed.
func (f *ToolFormat) Grammar(tools []Tool, name string, parallel bool, reasoning *Reasoning) (string, error) {
	if f == nil || f.def == nil {
		return "", fmt.Errorf("reply: no tool-call format")
	}
	if f.def.grammar == nil {
		return "", fmt.Errorf("reply: format %s: no grammar can express its calls", f.Name)
	}
	if len(tools) == 0 {
		return "", fmt.Errorf("reply: format %s: a grammar needs at least one tool", f.Name)
	}
	seen := map[string]bool{}
	for i, t := range tools {
		if !validName(t.Name) {
			return "", fmt.Errorf("reply: tools[%d]: %q cannot be a function's name", i, t.Name)
		}
		if seen[t.Name] {
			return "", fmt.Errorf("reply: tools[%d]: %q is named twice", i, t.Name)
		}
		seen[t.Name] = true
		if len(bytes.TrimSpace(t.Parameters)) > 0 && !json.Valid(t.Parameters) {
			return "", fmt.Errorf("reply: tools[%d] (%s): parameters are not JSON", i, t.Name)
		}
	}
	if name != "" {
		if !seen[name] {
			return "", fmt.Errorf("reply: format %s: no tool is named %q", f.Name, name)
		}
		for _, t := range tools {
			if t.Name == name {
				tools = []Tool{t}
				break
			}
		}
	}
	g := &grammar{f: f}
	if err := f.def.grammar(g, callShape{tools: tools, parallel: parallel}); err != nil {
		return "", fmt.Errorf("reply: format %s: %w", f.Name, err)
	}
	start := "calls"
	if r := reasoning; r != nil && r.End != "" {
		// Whitespace may follow the block (Qwen3 writes "\n\n").
		body := g.textUntil("reasoning_text", r.End) + ` /[ \t\r\n]+/?`
		if r.Start == "" {
			start = "reasoning calls"
			g.rules = append([]string{"reasoning: " + body}, g.rules...)
		} else {
			start = "reasoning? calls"
			g.rules = append([]string{"reasoning: " + g.lit(r.Start) + " " + body}, g.rules...)
		}
	}
	var b strings.Builder
	b.WriteString("// Tool calls of format " + f.Name + ".\n")
	b.WriteString("start: " + start + "\n")
	for _, r := range g.rules {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// callShape is what the calls of a grammar may be.
type callShape struct {
	tools    []Tool
	parallel bool
}

// grammar collects the rules of one grammar.
type grammar struct {
	f     *ToolFormat
	rules []string
	n     int
}

// rule adds a rule and returns its name: prefix and a number.
func (g *grammar) rule(prefix, body string) string {
	name := fmt.Sprintf("%s_%d", prefix, g.n)
	g.n++
	g.add(name, body)
	return name
}

// add adds a rule of a given name.
func (g *grammar) add(name, body string) {
	g.rules = append(g.rules, name+": "+body)
}

// calls adds the rule "calls" as callList spells it.
func (g *grammar) calls(c callShape, sep string, call func(t Tool) (string, error)) error {
	l, err := g.callList(c, sep, call)
	if err != nil {
		return err
	}
	g.add("calls", l)
	return nil
}

// callList spells the calls of a reply: one call, or one or more joined
// by sep when parallel, each of one of the tools, spelled by call.
func (g *grammar) callList(c callShape, sep string, call func(t Tool) (string, error)) (string, error) {
	alts := make([]string, len(c.tools))
	for i, t := range c.tools {
		s, err := call(t)
		if err != nil {
			return "", fmt.Errorf("tool %s: %w", t.Name, err)
		}
		alts[i] = g.rule("call", s)
	}
	one := alts[0]
	if len(alts) > 1 {
		one = g.rule("call", strings.Join(alts, " | "))
	}
	switch {
	case !c.parallel:
		return one, nil
	case sep == "":
		return one + "+", nil
	default:
		return one + " (" + g.lit(sep) + " " + one + ")*", nil
	}
}

// lit spells text: its special tokens as <[id]>, the rest as quoted
// strings, one item each.
func (g *grammar) lit(s string) string {
	var items []string
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			items = append(items, larkString(text.String()))
			text.Reset()
		}
	}
	for i := 0; i < len(s); {
		if id, n := g.specialAt(s[i:]); n > 0 {
			flush()
			items = append(items, "<["+strconv.Itoa(int(id))+"]>")
			i += n
			continue
		}
		text.WriteByte(s[i])
		i++
	}
	flush()
	if len(items) == 0 {
		return `""`
	}
	return strings.Join(items, " ")
}

// specialAt returns the id and length of the longest special token that s
// begins with (n is 0 where none does). Only markup can be a special
// token: it begins with '<' or '['.
func (g *grammar) specialAt(s string) (int32, int) {
	if g.f.special == nil || s == "" || (s[0] != '<' && s[0] != '[') {
		return 0, 0
	}
	for n := min(len(s), 64); n > 1; n-- {
		if id, ok := g.f.special(s[:n]); ok {
			return id, n
		}
	}
	return 0, 0
}

// larkString quotes s as a Lark string literal.
func larkString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// larkRegex escapes text for a /regex/ that matches it literally.
func larkRegex(s string) string {
	s = regexp.QuoteMeta(s)
	s = strings.ReplaceAll(s, "/", `\/`)
	s = strings.ReplaceAll(s, "\n", `\n`)
	s = strings.ReplaceAll(s, "\r", `\r`)
	s = strings.ReplaceAll(s, "\t", `\t`)
	return s
}

// textUntil returns the items of any text up to and including end. Where
// end begins with spelled text, the text is a lazy lexeme that stops at
// end's first occurrence; where it begins with a special token, which
// text never contains, free text comes before the token.
func (g *grammar) textUntil(prefix, end string) string {
	if _, n := g.specialAt(end); n > 0 {
		return "/(?s:.*)/ " + g.lit(end)
	}
	// The spelled part of end, up to its first special token.
	i := 0
	for i < len(end) {
		if _, n := g.specialAt(end[i:]); n > 0 {
			break
		}
		i++
	}
	name := fmt.Sprintf("%s_%d", prefix, g.n)
	g.n++
	g.rules = append(g.rules, name+"[lazy]: /(?s:.*)"+larkRegex(end[:i])+"/")
	if i < len(end) {
		return name + " " + g.lit(end[i:])
	}
	return name
}

// args returns a rule for a tool's arguments: a JSON object its
// parameters schema allows.
func (g *grammar) args(t Tool) string {
	return g.rule("args", "%json "+objectSchema(t.Parameters))
}

// noParameters is the schema of a tool without parameters: as the OpenAI
// API reads it, one that takes none.
const noParameters = `{"type":"object","properties":{},"additionalProperties":false}`

// objectSchema is a parameters schema that allows objects only: the
// schema as given where it says its type, else with "type": "object"
// added.
func objectSchema(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return noParameters
	}
	if raw[0] != '{' {
		return `{"type":"object"}`
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return `{"type":"object"}`
	}
	s := compactJSON(string(raw))
	if _, ok := top["type"]; ok {
		return s
	}
	if s == "{}" {
		return `{"type":"object"}`
	}
	return `{"type":"object",` + s[1:]
}

// param is one property of a parameters schema.
type param struct {
	name     string
	schema   json.RawMessage
	required bool
}

// params reads a parameters schema's properties in the order written,
// and the definitions ($defs, definitions) they may refer to. free is true
// where the schema lists no properties and allows others; no schema
// allows none.
func params(raw json.RawMessage) (ps []param, defs string, free bool) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" {
		return nil, "", false
	}
	var top struct {
		Properties           json.RawMessage `json:"properties"`
		Required             []string        `json:"required"`
		Defs                 json.RawMessage `json:"$defs"`
		Definitions          json.RawMessage `json:"definitions"`
		AdditionalProperties json.RawMessage `json:"additionalProperties"`
	}
	if json.Unmarshal(raw, &top) != nil {
		return nil, "", true
	}
	req := map[string]bool{}
	for _, r := range top.Required {
		req[r] = true
	}
	keys, values := orderedObject(top.Properties)
	for i, k := range keys {
		ps = append(ps, param{name: k, schema: values[i], required: req[k]})
	}
	var d []string
	if len(top.Defs) > 0 {
		d = append(d, `"$defs":`+compactJSON(string(top.Defs)))
	}
	if len(top.Definitions) > 0 {
		d = append(d, `"definitions":`+compactJSON(string(top.Definitions)))
	}
	free = len(ps) == 0 && string(bytes.TrimSpace(top.AdditionalProperties)) != "false"
	return ps, strings.Join(d, ","), free
}

// orderedObject returns a JSON object's keys and values in the order
// written.
func orderedObject(raw json.RawMessage) ([]string, []json.RawMessage) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil, nil
	}
	var keys []string
	var values []json.RawMessage
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil, nil
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, nil
		}
		keys = append(keys, k)
		values = append(values, v)
	}
	return keys, values
}

// jsonValue returns a rule for a JSON value a parameter's schema allows,
// with the definitions of its tool's schema beside it.
func (g *grammar) jsonValue(schema json.RawMessage, defs string) string {
	s := compactJSON(string(bytes.TrimSpace(schema)))
	if s == "" || s[0] != '{' {
		s = "{}"
	}
	if defs != "" {
		if s == "{}" {
			s = "{" + defs + "}"
		} else {
			s = "{" + defs + "," + s[1:]
		}
	}
	return g.rule("value", "%json "+s)
}

// stringEnum returns a parameter's allowed strings where its schema is an
// enum (or const) of strings only.
func stringEnum(schema json.RawMessage) ([]string, bool) {
	var s struct {
		Enum  []json.RawMessage `json:"enum"`
		Const json.RawMessage   `json:"const"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil, false
	}
	vals := s.Enum
	if len(s.Const) > 0 {
		vals = []json.RawMessage{s.Const}
	}
	if len(vals) == 0 {
		return nil, false
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		if json.Unmarshal(v, &out[i]) != nil {
			return nil, false
		}
	}
	return out, true
}

// textValue returns the items of a parameter's value written as text and
// ended by close: a string's text as it is, other types as JSON.
func (g *grammar) textValue(p param, defs, close string) string {
	if vals, ok := stringEnum(p.schema); ok {
		alts := make([]string, len(vals))
		for i, v := range vals {
			alts[i] = larkString(v)
		}
		return "(" + strings.Join(alts, " | ") + ") " + g.lit(close)
	}
	types := schemaTypes(p.schema, 0)
	if len(types) == 0 || contains(types, "string") {
		return g.textUntil("text", close)
	}
	return g.jsonValue(p.schema, defs) + " " + g.lit(close)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sequence joins the items of a tool's parameters: required ones always,
// optional ones when the model writes them, in the schema's order. sep
// comes between items ("" for none).
func (g *grammar) sequence(items []string, required []bool, sep string) string {
	if len(items) == 0 {
		return ""
	}
	if sep == "" {
		out := make([]string, len(items))
		for i, it := range items {
			if required[i] {
				out[i] = it
			} else {
				out[i] = "(" + it + ")?"
			}
		}
		return strings.Join(out, " ")
	}
	// With a separator, required items come first, so that each optional
	// one after them brings its own separator.
	var req, opt []string
	for i, it := range items {
		if required[i] {
			req = append(req, it)
		} else {
			opt = append(opt, it)
		}
	}
	s := g.lit(sep)
	if len(req) > 0 {
		out := strings.Join(req, " "+s+" ")
		for _, o := range opt {
			out += " (" + s + " " + o + ")?"
		}
		return out
	}
	if len(opt) > 12 {
		// Many optional items: any of them, in any order.
		any := g.rule("param", strings.Join(opt, " | "))
		return "(" + any + " (" + s + " " + any + ")*)?"
	}
	// None required: the first one written, then any of those after it.
	alts := make([]string, len(opt))
	for i := range opt {
		a := opt[i]
		for _, o := range opt[i+1:] {
			a += " (" + s + " " + o + ")?"
		}
		alts[i] = a
	}
	return "(" + strings.Join(alts, " | ") + ")?"
}
