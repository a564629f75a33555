package reply

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
)

// The formats whose arguments are a JSON object as the model writes it.

// jsonTools is Hermes' and Qwen's format: one JSON object per call between
// <tool_call> and </tool_call>.
//
//	<tool_call>
//	{"name": "get_weather", "arguments": {"city": "Paris"}}
//	</tool_call>
var jsonTools = &format{
	name:   "json_tools",
	starts: []string{"<tool_call>"},
	end:    "</tool_call>",
	parse:  parseJSONCall,
	detect: func(in Inputs) bool { return templateHas(in, "<tool_call>", "tool_call.name") },
	grammar: func(g *grammar, c callShape) error {
		return g.calls(c, "\n", func(t Tool) (string, error) {
			return g.lit("<tool_call>") + " " +
				larkString("\n{\"name\": "+jsonString(t.Name)+", \"arguments\": ") + " " +
				g.args(t) + " " + larkString("}\n") + " " + g.lit("</tool_call>"), nil
		})
	},
}

// parseJSONCall reads a call object, or a list of them.
func parseJSONCall(body string, _ toolSet) ([]ToolCall, string, error) {
	v, rest, err := firstJSON(body)
	if err != nil {
		return nil, body, err
	}
	calls, err := jsonCalls(v)
	return calls, rest, err
}

// jsonCalls reads one call object, or a list of them.
func jsonCalls(v json.RawMessage) ([]ToolCall, error) {
	switch jsonKind(v) {
	case "object":
		c, err := callObject(v)
		if err != nil {
			return nil, err
		}
		return []ToolCall{c}, nil
	case "array":
		var list []json.RawMessage
		if err := json.Unmarshal(v, &list); err != nil {
			return nil, err
		}
		calls := make([]ToolCall, 0, len(list))
		for _, item := range list {
			c, err := callObject(item)
			if err != nil {
				return nil, err
			}
			calls = append(calls, c)
		}
		return calls, nil
	}
	return nil, errNotObject
}

// llama3JSON is Llama 3.1-3.3's format for the caller's own tools: a JSON
// object with "name" and "parameters", where content would begin or after
// <|python_tag|>; several are joined by ";".
//
//	{"name": "get_weather", "parameters": {"city": "Paris"}}
var llama3JSON = &format{
	name:    "llama3_json",
	starts:  []string{"<|python_tag|>"},
	leading: true,
	parse:   parseJSONSequence,
	detect: func(in Inputs) bool {
		return templateHas(in, "<|eot_id|>") &&
			(templateHas(in, "<|python_tag|>") || templateHas(in, `"parameters"`) || templateHas(in, `\"parameters\"`))
	},
	grammar: func(g *grammar, c callShape) error {
		return g.calls(c, "; ", func(t Tool) (string, error) {
			return larkString("{\"name\": "+jsonString(t.Name)+", \"parameters\": ") + " " +
				g.args(t) + " " + larkString("}"), nil
		})
	},
}

// parseJSONSequence reads call objects one after another, apart by space
// or ";", up to the first text that is not one.
func parseJSONSequence(body string, _ toolSet) ([]ToolCall, string, error) {
	var calls []ToolCall
	rest := body
	for {
		s := strings.TrimLeft(rest, spaces+";")
		if !strings.HasPrefix(s, "{") {
			break
		}
		v, after, err := firstJSON(s)
		if err != nil {
			break
		}
		c, err := callObject(v)
		if err != nil {
			break
		}
		calls = append(calls, c)
		rest = after
	}
	if len(calls) == 0 {
		return nil, body, errNoCall
	}
	return calls, rest, nil
}

// mistral is Mistral's format: [TOOL_CALLS] before a JSON list of calls
// (v0.3), or before each call as name[ARGS]{arguments} (later models,
// which may put [CALL_ID]id before [ARGS]). No marker ends it.
//
//	[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}
//	[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]
var mistral = &format{
	name:   "mistral",
	starts: []string{"[TOOL_CALLS]"},
	parse:  parseMistral,
	detect: func(in Inputs) bool { return templateHas(in, "[TOOL_CALLS]") },
	variant: func(template string) string {
		if template != "" && !strings.Contains(template, "[ARGS]") {
			return "list"
		}
		return ""
	},
	grammar: func(g *grammar, c callShape) error {
		if g.f.variant == "list" {
			l, err := g.callList(c, ", ", func(t Tool) (string, error) {
				return larkString("{\"name\": "+jsonString(t.Name)+", \"arguments\": ") + " " +
					g.args(t) + " " + larkString("}"), nil
			})
			if err != nil {
				return err
			}
			g.add("calls", g.lit("[TOOL_CALLS]")+" "+larkString("[")+" "+l+" "+larkString("]"))
			return nil
		}
		return g.calls(c, "", func(t Tool) (string, error) {
			return g.lit("[TOOL_CALLS]"+t.Name+"[ARGS]") + " " + g.args(t), nil
		})
	},
}

// mistralHeader is a call's head in the name[ARGS] spelling.
var mistralHeader = regexp.MustCompile(`^\s*([\w.\-]+)\s*(?:\[CALL_ID\]\s*[\w\-]*\s*)?\[ARGS\]`)

func parseMistral(body string, _ toolSet) ([]ToolCall, string, error) {
	if s := strings.TrimLeft(body, spaces); strings.HasPrefix(s, "[") {
		v, rest, err := firstJSON(s)
		if err != nil {
			return nil, body, err
		}
		calls, err := jsonCalls(v)
		return calls, rest, err
	}
	var calls []ToolCall
	rest := body
	for {
		m := mistralHeader.FindStringSubmatchIndex(rest)
		if m == nil {
			break
		}
		v, after, err := firstJSON(rest[m[1]:])
		if err != nil {
			break
		}
		args, err := argumentsText(v)
		if err != nil {
			break
		}
		calls = append(calls, ToolCall{Name: rest[m[2]:m[3]], Arguments: args})
		rest = after
	}
	if len(calls) == 0 {
		return nil, body, errNoCall
	}
	return calls, rest, nil
}

// DeepSeek's markers.
const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

// deepseekV3 is DeepSeek V3's and R1's format: in a section of calls,
// each call's type, its name and its arguments in a JSON code block.
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//	```json
//	{"city": "Paris"}
//	```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
var deepseekV3 = &format{
	name:   "deepseek_v3",
	starts: []string{dsCallsBegin},
	end:    dsCallsEnd,
	parse:  parseDeepSeek,
	detect: func(in Inputs) bool { return templateHas(in, dsCallsBegin, "```json") },
	grammar: func(g *grammar, c callShape) error {
		l, err := g.callList(c, "\n", func(t Tool) (string, error) {
			return g.lit(dsCallBegin+"function"+dsSep+t.Name+"\n```json\n") + " " +
				g.args(t) + " " + g.lit("\n```"+dsCallEnd), nil
		})
		if err != nil {
			return err
		}
		g.add("calls", g.lit(dsCallsBegin)+" "+l+" "+g.lit(dsCallsEnd))
		return nil
	},
}

// deepseekV31 is DeepSeek V3.1's format: each call's name, then its
// arguments as they are.
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
var deepseekV31 = &format{
	name:   "deepseek_v31",
	starts: []string{dsCallsBegin},
	end:    dsCallsEnd,
	parse:  parseDeepSeek,
	detect: func(in Inputs) bool { return templateHas(in, dsCallsBegin) },
	grammar: func(g *grammar, c callShape) error {
		l, err := g.callList(c, "", func(t Tool) (string, error) {
			return g.lit(dsCallBegin+t.Name+dsSep) + " " + g.args(t) + " " + g.lit(dsCallEnd), nil
		})
		if err != nil {
			return err
		}
		g.add("calls", g.lit(dsCallsBegin)+" "+l+" "+g.lit(dsCallsEnd))
		return nil
	},
}

// parseDeepSeek reads a section of calls in either DeepSeek spelling.
func parseDeepSeek(body string, _ toolSet) ([]ToolCall, string, error) {
	var calls []ToolCall
	s := body
	for {
		s = strings.TrimLeft(s, spaces)
		if s == "" {
			break
		}
		if !strings.HasPrefix(s, dsCallBegin) {
			return nil, body, errors.New("text between calls")
		}
		s = s[len(dsCallBegin):]
		j := strings.Index(s, dsCallEnd)
		if j < 0 {
			return nil, body, errors.New("a call without its end")
		}
		inner := s[:j]
		s = s[j+len(dsCallEnd):]
		k := strings.Index(inner, dsSep)
		if k < 0 {
			return nil, body, errors.New("a call without a name")
		}
		name, args := inner[:k], inner[k+len(dsSep):]
		// V3 and R1: the type, then the name on a line of its own above a
		// code block.
		if nl := strings.IndexByte(args, '\n'); nl >= 0 && strings.HasPrefix(strings.TrimLeft(args[nl+1:], " \t"), "```") {
			name, args = args[:nl], args[nl+1:]
		}
		name = strings.TrimSpace(name)
		if !validName(name) {
			return nil, body, errors.New("a call without a name")
		}
		a, err := argumentsText(json.RawMessage(unfence(args)))
		if err != nil {
			return nil, body, err
		}
		calls = append(calls, ToolCall{Name: name, Arguments: a})
	}
	return calls, "", nil
}

// unfence returns the text of a Markdown code block, or s trimmed where it
// is not one.
func unfence(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "```") {
		return t
	}
	t = strings.TrimPrefix(t[3:], "json")
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(t), "```"))
}

// harmony is gpt-oss's format: a call is a message on the commentary
// channel addressed to functions.NAME, ended by <|call|>. The headers of
// the other messages are frames: the analysis channel is reasoning (see
// Reasoning), the final channel content.
//
//	<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
var harmony = &format{
	name: "harmony",
	// The address may also come before the channel, in the header the
	// prompt opened ("<|start|>assistant" then " to=functions.NAME").
	starts: []string{"<|channel|>commentary to=functions.", "<|channel|>analysis to=functions.", " to=functions."},
	end:    "<|call|>",
	frames: []string{
		"<|start|>assistant",
		"<|channel|>final<|message|>",
		"<|channel|>commentary<|message|>",
		"<|end|>",
		"<|return|>",
	},
	parse:  parseHarmony,
	detect: func(in Inputs) bool { return templateHas(in, "<|channel|>", "<|call|>") },
	grammar: func(g *grammar, c callShape) error {
		return g.calls(c, "", func(t Tool) (string, error) {
			return "(" + g.lit("<|start|>assistant") + ")? " +
				g.lit("<|channel|>commentary to=functions."+t.Name+" <|constrain|>json<|message|>") + " " +
				g.args(t) + " " + g.lit("<|call|>"), nil
		})
	},
}

// parseHarmony reads a call's recipient name, the rest of its header and
// its message.
func parseHarmony(body string, _ toolSet) ([]ToolCall, string, error) {
	n := strings.IndexAny(body, " \t\n<")
	if n < 0 {
		return nil, body, errors.New("a call without a message")
	}
	name := body[:n]
	m := strings.Index(body[n:], "<|message|>")
	if !validName(name) || m < 0 {
		return nil, body, errors.New("a call without a name or a message")
	}
	a, err := argumentsText(json.RawMessage(body[n+m+len("<|message|>"):]))
	if err != nil {
		return nil, body, err
	}
	return []ToolCall{{Name: name, Arguments: a}}, "", nil
}

// Kimi K2's markers.
const (
	kimiSectionBegin = "<|tool_calls_section_begin|>"
	kimiSectionEnd   = "<|tool_calls_section_end|>"
	kimiCallBegin    = "<|tool_call_begin|>"
	kimiArgBegin     = "<|tool_call_argument_begin|>"
	kimiCallEnd      = "<|tool_call_end|>"
)

// kimiK2 is Kimi K2's format: in a section, each call's id
// (functions.NAME:INDEX) and its JSON arguments.
//
//	<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>
var kimiK2 = &format{
	name:   "kimi_k2",
	starts: []string{kimiSectionBegin},
	end:    kimiSectionEnd,
	parse:  parseKimiK2,
	detect: func(in Inputs) bool { return templateHas(in, kimiSectionBegin) },
	grammar: func(g *grammar, c callShape) error {
		l, err := g.callList(c, "", func(t Tool) (string, error) {
			return g.lit(kimiCallBegin+"functions."+t.Name+":") + " /[0-9]+/ " + g.lit(kimiArgBegin) + " " +
				g.args(t) + " " + g.lit(kimiCallEnd), nil
		})
		if err != nil {
			return err
		}
		g.add("calls", g.lit(kimiSectionBegin)+" "+l+" "+g.lit(kimiSectionEnd))
		return nil
	},
}

// kimiID is a Kimi K2 call id: functions.NAME:INDEX.
var kimiID = regexp.MustCompile(`^\s*(?:functions\.)?(.+?):\d+\s*$`)

func parseKimiK2(body string, _ toolSet) ([]ToolCall, string, error) {
	var calls []ToolCall
	s := body
	if !strings.Contains(s, kimiCallBegin) {
		// A section that holds one call without its markers.
		s = kimiCallBegin + s + kimiCallEnd
	}
	for {
		s = strings.TrimLeft(s, spaces)
		if s == "" {
			break
		}
		if !strings.HasPrefix(s, kimiCallBegin) {
			return nil, body, errors.New("text between calls")
		}
		s = s[len(kimiCallBegin):]
		j := strings.Index(s, kimiCallEnd)
		if j < 0 {
			return nil, body, errors.New("a call without its end")
		}
		inner := s[:j]
		s = s[j+len(kimiCallEnd):]
		k := strings.Index(inner, kimiArgBegin)
		if k < 0 {
			return nil, body, errors.New("a call without arguments")
		}
		m := kimiID.FindStringSubmatch(inner[:k])
		if m == nil || !validName(m[1]) {
			return nil, body, errors.New("a call without a name")
		}
		a, err := looseArguments(inner[k+len(kimiArgBegin):])
		if err != nil {
			return nil, body, err
		}
		calls = append(calls, ToolCall{Name: m[1], Arguments: a})
	}
	return calls, "", nil
}

// looseArguments reads arguments written as JSON, or failing that as a
// Python dict.
func looseArguments(s string) (string, error) {
	if a, err := argumentsText(json.RawMessage(s)); err == nil {
		return a, nil
	}
	r := &pyReader{scanner: scanner{s: strings.TrimSpace(s)}}
	v, err := r.literal()
	if err != nil || r.i != len(r.s) || !strings.HasPrefix(v, "{") {
		return "", errNotObject
	}
	return v, nil
}
