package reply

import (
	"errors"
	"regexp"
	"strings"
)

// The formats that write each argument in markup of its own, its value as
// text: a value is typed by its tool's parameters schema (see typedValue).

// qwen3Coder is Qwen3-Coder's (and Qwen3.5's) format.
//
//	<tool_call>
//	<function=get_weather>
//	<parameter=city>
//	Paris
//	</parameter>
//	</function>
//	</tool_call>
var qwen3Coder = &format{
	name:   "qwen3_coder",
	starts: []string{"<tool_call>"},
	end:    "</tool_call>",
	parse:  parseQwen3Coder,
	detect: func(in Inputs) bool {
		return templateHas(in, "<tool_call>\n<function=") || templateHas(in, `<tool_call>\n<function=`)
	},
	grammar: func(g *grammar, c callShape) error {
		return g.calls(c, "\n", func(t Tool) (string, error) {
			ps := g.params(t, "", func(p param, defs string) string {
				return larkString("<parameter="+p.name+">\n") + " " + g.textValue(p, defs, "\n</parameter>") + " " + larkString("\n")
			}, func() string {
				return larkString("<parameter=") + " " + paramName + " " + larkString(">\n") + " " +
					g.textUntil("text", "\n</parameter>") + " " + larkString("\n")
			})
			return larkString("<tool_call>\n<function="+t.Name+">\n") + " " + ps + " " +
				larkString("</function>\n</tool_call>"), nil
		})
	},
}

// paramName is the terminal of a parameter's name where the schema lists
// none.
const paramName = `/[A-Za-z_][A-Za-z0-9_.\-]*/`

var (
	qwenFunction  = regexp.MustCompile(`(?s)^\s*<function=([^>\n]*)>(.*?)</function>`)
	qwenParameter = regexp.MustCompile(`(?s)^\s*<parameter=([^>\n]*)>(.*?)</parameter>`)
)

func parseQwen3Coder(body string, ts toolSet) ([]ToolCall, string, error) {
	var calls []ToolCall
	s := body
	for !isSpace(s) {
		m := qwenFunction.FindStringSubmatchIndex(s)
		if m == nil {
			return nil, body, errors.New("not a function")
		}
		name := strings.TrimSpace(s[m[2]:m[3]])
		inner := s[m[4]:m[5]]
		s = s[m[1]:]
		if !validName(name) {
			return nil, body, errors.New("a function without a name")
		}
		var args object
		for !isSpace(inner) {
			p := qwenParameter.FindStringSubmatchIndex(inner)
			if p == nil {
				return nil, body, errors.New("not a parameter")
			}
			key := strings.TrimSpace(inner[p[2]:p[3]])
			v := inner[p[4]:p[5]]
			v = strings.TrimPrefix(v, "\n")
			v = strings.TrimSuffix(v, "\n")
			args.set(key, typedValue(v, ts.types(name, key)))
			inner = inner[p[1]:]
		}
		calls = append(calls, ToolCall{Name: name, Arguments: args.String()})
	}
	return calls, "", nil
}

// params spells a tool's parameters: each listed property by one, in the
// schema's order, required ones always; where the schema lists none but
// allows any, any number of free ones. sep comes between parameters.
func (g *grammar) params(t Tool, sep string, one func(p param, defs string) string, free func() string) string {
	ps, defs, isFree := params(t.Parameters)
	if len(ps) == 0 {
		if !isFree {
			return ""
		}
		f := g.rule("param", free())
		if sep == "" {
			return f + "*"
		}
		return "(" + f + " (" + g.lit(sep) + " " + f + ")*)?"
	}
	items := make([]string, len(ps))
	req := make([]bool, len(ps))
	for i, p := range ps {
		items[i] = g.rule("param", one(p, defs))
		req[i] = p.required
	}
	return g.sequence(items, req, sep)
}

// argKV is the format of GLM 4.5-4.7 (and Poolside Laguna) and LongCat:
// the name, then each argument's key and value in tags of their own.
//
//	<tool_call>get_weather
//	<arg_key>city</arg_key>
//	<arg_value>Paris</arg_value>
//	</tool_call>
type argKV struct{ key, keyEnd, value, valueEnd string }

var (
	glmTags     = argKV{"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"}
	longcatTags = argKV{"<longcat_arg_key>", "</longcat_arg_key>", "<longcat_arg_value>", "</longcat_arg_value>"}
)

var glm47 = &format{
	name:    "glm47",
	starts:  []string{"<tool_call>"},
	end:     "</tool_call>",
	parse:   glmTags.parse,
	detect:  func(in Inputs) bool { return templateHas(in, "<arg_key>") },
	grammar: glmTags.grammar("<tool_call>", "</tool_call>"),
}

// laguna is Poolside Laguna's name for glm47's format.
var laguna = &format{
	name:    "laguna",
	starts:  glm47.starts,
	end:     glm47.end,
	parse:   glm47.parse,
	grammar: glm47.grammar,
}

var longcat = &format{
	name:    "longcat",
	starts:  []string{"<longcat_tool_call>"},
	end:     "</longcat_tool_call>",
	parse:   longcatTags.parse,
	detect:  func(in Inputs) bool { return templateHas(in, "<longcat_tool_call>") },
	grammar: longcatTags.grammar("<longcat_tool_call>", "</longcat_tool_call>"),
}

func (a argKV) parse(body string, ts toolSet) ([]ToolCall, string, error) {
	t := strings.TrimSpace(body)
	if strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		return parseJSONCall(body, ts)
	}
	i := strings.Index(t, a.key)
	if i < 0 {
		i = len(t)
	}
	name := strings.TrimSpace(t[:i])
	if !validName(name) {
		return nil, body, errors.New("a call without a name")
	}
	var args object
	s := t[i:]
	for !isSpace(s) {
		s = strings.TrimLeft(s, spaces)
		k, after, ok := cut(s, a.key, a.keyEnd)
		if !ok {
			return nil, body, errors.New("not an argument")
		}
		v, after, ok := cut(strings.TrimLeft(after, spaces), a.value, a.valueEnd)
		if !ok {
			return nil, body, errors.New("an argument without a value")
		}
		key := strings.TrimSpace(k)
		args.set(key, typedValue(strings.TrimSpace(v), ts.types(name, key)))
		s = after
	}
	return []ToolCall{{Name: name, Arguments: args.String()}}, "", nil
}

// cut reads open, text and close at the start of s: the text and what
// follows.
func cut(s, open, close string) (text, rest string, ok bool) {
	if !strings.HasPrefix(s, open) {
		return "", s, false
	}
	s = s[len(open):]
	j := strings.Index(s, close)
	if j < 0 {
		return "", s, false
	}
	return s[:j], s[j+len(close):], true
}

func (a argKV) grammar(start, end string) func(g *grammar, c callShape) error {
	return func(g *grammar, c callShape) error {
		return g.calls(c, "\n", func(t Tool) (string, error) {
			ps := g.params(t, "", func(p param, defs string) string {
				return larkString(a.key+p.name+a.keyEnd+"\n"+a.value) + " " + g.textValue(p, defs, a.valueEnd) + " " + larkString("\n")
			}, func() string {
				return larkString(a.key) + " " + paramName + " " + larkString(a.keyEnd+"\n"+a.value) + " " +
					g.textUntil("text", a.valueEnd) + " " + larkString("\n")
			})
			return g.lit(start) + " " + larkString(t.Name+"\n") + " " + ps + " " + g.lit(end), nil
		})
	}
}

// invokeXML is the format of MiniMax-M2, Muse Spark and DeepSeek V3.2
// (DSML): a section holds invocations, each the function's name as an
// attribute and its parameters as elements.
//
//	<minimax:tool_call>
//	<invoke name="get_weather">
//	<parameter name="city">Paris</parameter>
//	</invoke>
//	</minimax:tool_call>
type invokeXML struct {
	invoke, invokeEnd, param, paramEnd string
	// stringAttr: each parameter says whether its value is a string
	// (string="true") or JSON (DSML).
	stringAttr bool
}

var (
	minimaxTags = invokeXML{invoke: "<invoke", invokeEnd: "</invoke>", param: "<parameter", paramEnd: "</parameter>"}
	museTags    = invokeXML{invoke: "<atem:invoke", invokeEnd: "</atem:invoke>", param: "<atem:parameter", paramEnd: "</atem:parameter>"}
	dsmlTags    = invokeXML{invoke: "<｜DSML｜invoke", invokeEnd: "</｜DSML｜invoke>", param: "<｜DSML｜parameter", paramEnd: "</｜DSML｜parameter>", stringAttr: true}
)

var minimaxM2 = &format{
	name:    "minimax_m2",
	starts:  []string{"<minimax:tool_call>"},
	end:     "</minimax:tool_call>",
	parse:   minimaxTags.parse,
	detect:  func(in Inputs) bool { return templateHas(in, "<minimax:tool_call>") },
	grammar: minimaxTags.grammar("<minimax:tool_call>\n", "</minimax:tool_call>"),
}

var museSpark = &format{
	name:    "muse_spark",
	starts:  []string{"<atem:function_calls>"},
	end:     "</atem:function_calls>",
	parse:   museTags.parse,
	detect:  func(in Inputs) bool { return templateHas(in, "<atem:function_calls>") },
	grammar: museTags.grammar("<atem:function_calls>\n", "</atem:function_calls>"),
}

// deepseekV32 is DeepSeek V3.2's DSML format.
//
//	<｜DSML｜function_calls>
//	<｜DSML｜invoke name="get_weather">
//	<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//	</｜DSML｜invoke>
//	</｜DSML｜function_calls>
var deepseekV32 = &format{
	name:    "deepseek_v32",
	starts:  []string{"<｜DSML｜function_calls>"},
	end:     "</｜DSML｜function_calls>",
	parse:   dsmlTags.parse,
	detect:  func(in Inputs) bool { return templateHas(in, "｜DSML｜function_calls") },
	grammar: dsmlTags.grammar("<｜DSML｜function_calls>\n", "</｜DSML｜function_calls>"),
}

// xmlAttr is one attribute: name="value", name='value' or name=value.
var xmlAttr = regexp.MustCompile(`([\w:-]+)\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+)`)

// attrs reads a start tag's attributes.
func attrs(s string) map[string]string {
	m := map[string]string{}
	for _, a := range xmlAttr.FindAllStringSubmatch(s, -1) {
		m[a[1]] = unquote(a[2])
	}
	return m
}

// unquote strips a value's quotes.
func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// element reads an element at the start of s (after space): its start
// tag's attributes, its text and what follows it.
func element(s, open, close string) (at map[string]string, text, rest string, ok bool) {
	s = strings.TrimLeft(s, spaces)
	if !strings.HasPrefix(s, open) {
		return nil, "", s, false
	}
	s = s[len(open):]
	// The start tag ends at its first '>', quotes aside.
	gt := -1
	var q byte
	for i := 0; i < len(s) && gt < 0; i++ {
		switch c := s[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '"' || c == '\'':
			q = c
		case c == '>':
			gt = i
		case c == '<' || c == '\n':
			return nil, "", s, false
		}
	}
	if gt < 0 {
		return nil, "", s, false
	}
	head := s[:gt]
	if head != "" && head[0] != ' ' && head[0] != '\t' {
		return nil, "", s, false
	}
	s = s[gt+1:]
	j := strings.Index(s, close)
	if j < 0 {
		return nil, "", s, false
	}
	return attrs(head), s[:j], s[j+len(close):], true
}

func (x invokeXML) parse(body string, ts toolSet) ([]ToolCall, string, error) {
	var calls []ToolCall
	s := body
	for !isSpace(s) {
		at, inner, rest, ok := element(s, x.invoke, x.invokeEnd)
		if !ok || !validName(at["name"]) {
			return nil, body, errors.New("not an invocation")
		}
		name := at["name"]
		s = rest
		var args object
		for !isSpace(inner) {
			pa, v, rest, ok := element(inner, x.param, x.paramEnd)
			if !ok || pa["name"] == "" {
				return nil, body, errors.New("not a parameter")
			}
			inner = rest
			key := pa["name"]
			switch {
			case x.stringAttr && pa["string"] == "true":
				args.set(key, jsonString(v))
			case x.stringAttr && pa["string"] == "false":
				args.set(key, typedValue(v, []string{"object", "array", "integer", "number", "boolean", "null"}))
			default:
				v = strings.TrimSpace(v)
				args.set(key, typedValue(v, ts.types(name, key)))
			}
		}
		calls = append(calls, ToolCall{Name: name, Arguments: args.String()})
	}
	return calls, "", nil
}

func (x invokeXML) grammar(start, end string) func(g *grammar, c callShape) error {
	return func(g *grammar, c callShape) error {
		l, err := g.callList(c, "", func(t Tool) (string, error) {
			ps := g.params(t, "", func(p param, defs string) string {
				open := x.param + ` name="` + p.name + `"`
				if x.stringAttr {
					if isStringParam(p) {
						open += ` string="true"`
					} else {
						open += ` string="false"`
					}
				}
				return g.lit(open+">") + " " + g.textValue(p, defs, x.paramEnd) + " " + larkString("\n")
			}, func() string {
				open := g.lit(x.param+` name="`) + " " + paramName + " "
				if x.stringAttr {
					return open + g.lit(`" string="true">`) + " " + g.textUntil("text", x.paramEnd) + " " + larkString("\n")
				}
				return open + g.lit(`">`) + " " + g.textUntil("text", x.paramEnd) + " " + larkString("\n")
			})
			return g.lit(x.invoke+` name="`+t.Name+"\">\n") + " " + ps + " " + g.lit(x.invokeEnd+"\n"), nil
		})
		if err != nil {
			return err
		}
		g.add("calls", g.lit(start)+" "+l+" "+g.lit(end))
		return nil
	}
}

// isStringParam reports whether a parameter's value is written as text
// (as textValue spells it).
func isStringParam(p param) bool {
	if _, ok := stringEnum(p.schema); ok {
		return true
	}
	types := schemaTypes(p.schema, 0)
	return len(types) == 0 || contains(types, "string")
}

// minicpm5 is MiniCPM5's format: each call a function element, no section
// around them; a value holding markup is in a CDATA block.
//
//	<function name="get_weather"><param name="city">Paris</param></function>
var minicpm5 = &format{
	name:   "minicpm5",
	starts: []string{"<function name="},
	end:    "</function>",
	parse:  parseMiniCPM5,
	detect: func(in Inputs) bool { return templateHas(in, `<function name="`, `<param name="`) },
	grammar: func(g *grammar, c callShape) error {
		return g.calls(c, "\n", func(t Tool) (string, error) {
			ps := g.params(t, "", func(p param, defs string) string {
				return larkString(`<param name="`+p.name+`">`) + " " + g.textValue(p, defs, "</param>")
			}, func() string {
				return larkString(`<param name="`) + " " + paramName + " " + larkString(`">`) + " " + g.textUntil("text", "</param>")
			})
			return larkString(`<function name="`+t.Name+`">`) + " " + ps + " " + larkString("</function>"), nil
		})
	},
}

func parseMiniCPM5(body string, ts toolSet) ([]ToolCall, string, error) {
	// The start marker took the tag's beginning: the name and '>' remain.
	gt := strings.IndexByte(body, '>')
	if gt < 0 {
		return nil, body, errors.New("a function without a name")
	}
	name := unquote(body[:gt])
	if !validName(name) {
		return nil, body, errors.New("a function without a name")
	}
	var args object
	s := body[gt+1:]
	for !isSpace(s) {
		pa, v, rest, ok := element(s, "<param", "</param>")
		if !ok && strings.Contains(s, "<![CDATA[") {
			// A CDATA block may hold "</param>": the value ends after it.
			pa, v, rest, ok = cdataParam(s)
		}
		if !ok || pa["name"] == "" {
			return nil, body, errors.New("not a parameter")
		}
		s = rest
		if t := strings.TrimSpace(v); strings.HasPrefix(t, "<![CDATA[") && strings.HasSuffix(t, "]]>") {
			v = t[len("<![CDATA[") : len(t)-len("]]>")]
			args.set(pa["name"], typedValue(v, ts.types(name, pa["name"])))
			continue
		}
		args.set(pa["name"], typedValue(strings.TrimSpace(v), ts.types(name, pa["name"])))
	}
	return []ToolCall{{Name: name, Arguments: args.String()}}, "", nil
}

// cdataParam reads a param element whose value is a CDATA block.
func cdataParam(s string) (map[string]string, string, string, bool) {
	s = strings.TrimLeft(s, spaces)
	gt := strings.IndexByte(s, '>')
	if !strings.HasPrefix(s, "<param") || gt < 0 {
		return nil, "", s, false
	}
	head, v := s[len("<param"):gt], s[gt+1:]
	t := strings.TrimLeft(v, spaces)
	end := strings.Index(t, "]]>")
	if !strings.HasPrefix(t, "<![CDATA[") || end < 0 {
		return nil, "", s, false
	}
	after := strings.TrimLeft(t[end+len("]]>"):], spaces)
	if !strings.HasPrefix(after, "</param>") {
		return nil, "", s, false
	}
	return attrs(head), t[:end+len("]]>")], after[len("</param>"):], true
}

// Kimi K3's "xtml" markup.
const (
	xtmlToolsOpen  = "<|open|>tools<|sep|>"
	xtmlToolsClose = "<|close|>tools<|sep|>"
	xtmlCallOpen   = "<|open|>call"
	xtmlCallClose  = "<|close|>call<|sep|>"
	xtmlArgOpen    = "<|open|>argument"
	xtmlArgClose   = "<|close|>argument<|sep|>"
	xtmlJSONOpen   = "<|open|>json"
	xtmlJSONClose  = "<|close|>json<|sep|>"
	xtmlSep        = "<|sep|>"
)

// kimiK3 is Kimi K3's format, in its "xtml" markup: a section of calls,
// each with typed arguments or one JSON block. Its response markers are
// frames.
//
//	<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>
//	<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
//	<|close|>call<|sep|><|close|>tools<|sep|>
var kimiK3 = &format{
	name:   "kimi_k3",
	starts: []string{xtmlToolsOpen},
	end:    xtmlToolsClose,
	frames: []string{"<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"},
	parse:  parseKimiK3,
	vocab:  func(in Inputs) bool { return vocabHas(in, xtmlTokens...) },
	grammar: func(g *grammar, c callShape) error {
		l, err := g.callList(c, "", func(t Tool) (string, error) {
			return g.lit(xtmlCallOpen+` tool="`+t.Name+`" index="`) + " /[0-9]+/ " +
				g.lit(`"`+xtmlSep+xtmlJSONOpen+` type="object"`+xtmlSep) + " " +
				g.args(t) + " " + g.lit(xtmlJSONClose+xtmlCallClose), nil
		})
		if err != nil {
			return err
		}
		g.add("calls", g.lit(xtmlToolsOpen)+" "+l+" "+g.lit(xtmlToolsClose))
		return nil
	},
}

// xtmlElement reads <|open|>TAG ATTRS<|sep|>TEXT<|close|>TAG<|sep|> at
// the start of s (after space).
func xtmlElement(s, open, close string) (map[string]string, string, string, bool) {
	s = strings.TrimLeft(s, spaces)
	if !strings.HasPrefix(s, open) {
		return nil, "", s, false
	}
	s = s[len(open):]
	h := strings.Index(s, xtmlSep)
	if h < 0 || (h > 0 && s[0] != ' ') {
		return nil, "", s, false
	}
	head, s := s[:h], s[h+len(xtmlSep):]
	j := strings.Index(s, close)
	if j < 0 {
		return nil, "", s, false
	}
	at := attrs(head)
	for k, v := range at {
		at[k] = strings.NewReplacer("&quot;", `"`, "&amp;", "&").Replace(v)
	}
	return at, s[:j], s[j+len(close):], true
}

func parseKimiK3(body string, ts toolSet) ([]ToolCall, string, error) {
	var calls []ToolCall
	s := body
	for !isSpace(s) {
		at, inner, rest, ok := xtmlElement(s, xtmlCallOpen, xtmlCallClose)
		if !ok || !validName(at["tool"]) {
			return nil, body, errors.New("not a call")
		}
		s = rest
		name := at["tool"]
		if _, v, rest, ok := xtmlElement(inner, xtmlJSONOpen, xtmlJSONClose); ok && isSpace(rest) {
			a, err := argumentsText([]byte(v))
			if err != nil {
				return nil, body, err
			}
			calls = append(calls, ToolCall{Name: name, Arguments: a})
			continue
		}
		var args object
		for !isSpace(inner) {
			aa, v, rest, ok := xtmlElement(inner, xtmlArgOpen, xtmlArgClose)
			if !ok || aa["key"] == "" {
				return nil, body, errors.New("not an argument")
			}
			inner = rest
			switch ty := aa["type"]; ty {
			case "string":
				args.set(aa["key"], jsonString(v))
			case "":
				args.set(aa["key"], typedValue(v, ts.types(name, aa["key"])))
			default:
				args.set(aa["key"], typedValue(v, []string{"object", "array", "integer", "number", "boolean", "null"}))
			}
		}
		calls = append(calls, ToolCall{Name: name, Arguments: args.String()})
	}
	return calls, "", nil
}
