package reply

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
)

// toolSet is a request's tools by name, with the types of their
// parameters, for formats whose argument values are text.
type toolSet map[string]*toolInfo

// toolInfo is one tool's parameters schema as far as typing values needs.
type toolInfo struct {
	props map[string][]string // each property's JSON types, most specific first
}

func newToolSet(tools []Tool) toolSet {
	ts := make(toolSet, len(tools))
	for _, t := range tools {
		info := &toolInfo{props: map[string][]string{}}
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if len(t.Parameters) > 0 && json.Unmarshal(t.Parameters, &schema) == nil {
			for k, v := range schema.Properties {
				info.props[k] = schemaTypes(v, 0)
			}
		}
		ts[t.Name] = info
	}
	return ts
}

// types returns the JSON types a tool's parameter may take (nil where the
// schema does not say).
func (ts toolSet) types(tool, param string) []string {
	if info, ok := ts[tool]; ok {
		return info.props[param]
	}
	return nil
}

// typeOrder is the order in which a text value is tried against its
// parameter's types: the most specific first, string last.
var typeOrder = []string{"integer", "number", "boolean", "object", "array", "null", "string"}

// schemaTypes returns the types a JSON schema allows: its "type" (a name
// or a list), the types of its enum's values, and those of its anyOf,
// oneOf and allOf branches, in typeOrder.
func schemaTypes(raw json.RawMessage, depth int) []string {
	var s struct {
		Type  json.RawMessage   `json:"type"`
		Enum  []json.RawMessage `json:"enum"`
		Const json.RawMessage   `json:"const"`
		AnyOf []json.RawMessage `json:"anyOf"`
		OneOf []json.RawMessage `json:"oneOf"`
		AllOf []json.RawMessage `json:"allOf"`
	}
	if depth > 8 || json.Unmarshal(raw, &s) != nil {
		return nil
	}
	seen := map[string]bool{}
	var one string
	var many []string
	if json.Unmarshal(s.Type, &one) == nil {
		seen[one] = true
	} else if json.Unmarshal(s.Type, &many) == nil {
		for _, t := range many {
			seen[t] = true
		}
	}
	values := s.Enum
	if len(s.Const) > 0 {
		values = append(values, s.Const)
	}
	for _, v := range values {
		seen[jsonKind(v)] = true
	}
	for _, list := range [][]json.RawMessage{s.AnyOf, s.OneOf, s.AllOf} {
		for _, b := range list {
			for _, t := range schemaTypes(b, depth+1) {
				seen[t] = true
			}
		}
	}
	var out []string
	for _, t := range typeOrder {
		if seen[t] {
			out = append(out, t)
		}
	}
	return out
}

// jsonKind names the JSON type of a value's text.
func jsonKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return ""
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(v, ".eE") {
		return "number"
	}
	return "integer"
}

// typedValue is the JSON text of a value the model wrote as text, typed by
// its parameter's types: the first of them the text reads as, a string
// where none does or the schema gives none.
func typedValue(text string, types []string) string {
	t := strings.TrimSpace(text)
	if len(types) > 0 && !contains(types, "string") && strings.EqualFold(t, "null") {
		return "null"
	}
	for _, ty := range types {
		switch ty {
		case "integer":
			if i, err := strconv.ParseInt(t, 10, 64); err == nil {
				return strconv.FormatInt(i, 10)
			}
			if f, err := strconv.ParseFloat(t, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				return strconv.FormatInt(int64(f), 10)
			}
		case "number":
			if isJSONNumber(t) {
				return t
			}
			if f, err := strconv.ParseFloat(t, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return strconv.FormatFloat(f, 'g', -1, 64)
			}
		case "boolean":
			switch strings.ToLower(t) {
			case "true":
				return "true"
			case "false":
				return "false"
			}
		case "object", "array":
			want := byte('{')
			if ty == "array" {
				want = '['
			}
			if len(t) > 0 && t[0] == want && json.Valid([]byte(t)) {
				return compactJSON(t)
			}
		case "null":
			switch strings.ToLower(t) {
			case "null", "none":
				return "null"
			}
		case "string":
			return jsonString(text)
		}
	}
	return jsonString(text)
}

// isJSONNumber reports whether s is one JSON number.
func isJSONNumber(s string) bool {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// jsonString is s as a JSON string, with <, > and & as they are.
func jsonString(s string) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// compactJSON is valid JSON text without insignificant space.
func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

// object builds a JSON object's text from keys and values' JSON text, in
// the order the model wrote them; a repeated key keeps its first place and
// its last value.
type object struct {
	keys   []string
	values map[string]string
}

func (o *object) set(k, v string) {
	if o.values == nil {
		o.values = map[string]string{}
	}
	if _, ok := o.values[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.values[k] = v
}

func (o *object) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsonString(k))
		b.WriteByte(':')
		b.WriteString(o.values[k])
	}
	b.WriteByte('}')
	return b.String()
}

var errNotObject = errors.New("arguments are not a JSON object")

// argumentsText reads arguments the model wrote as JSON: an object, or a
// string holding one's text (as some templates render them); null or
// nothing is no arguments.
func argumentsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		s = strings.TrimSpace(s)
		if s == "" {
			return "{}", nil
		}
		if s[0] != '{' || !json.Valid([]byte(s)) {
			return "", errNotObject
		}
		return compactJSON(s), nil
	}
	if raw[0] != '{' || !json.Valid(raw) {
		return "", errNotObject
	}
	return compactJSON(string(raw)), nil
}

// callObject reads one call written as a JSON object: {"name": ...,
// "arguments": {...}} ("parameters" for Llama 3), or the OpenAI shape
// {"type": "function", "function": {"name": ..., "arguments": ...}}.
func callObject(raw json.RawMessage) (ToolCall, error) {
	var o struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
		Function   json.RawMessage `json:"function"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return ToolCall{}, err
	}
	if o.Name == nil && len(o.Function) > 0 && bytes.TrimSpace(o.Function)[0] == '{' {
		return callObject(o.Function)
	}
	if o.Name == nil || !validName(*o.Name) {
		return ToolCall{}, errors.New("a call without a name")
	}
	args := o.Arguments
	if len(args) == 0 {
		args = o.Parameters
	}
	a, err := argumentsText(args)
	if err != nil {
		return ToolCall{}, err
	}
	return ToolCall{Name: *o.Name, Arguments: a}, nil
}

// validName reports whether s can be a function's name: not empty, no
// space or control characters, no markup.
func validName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == '<' || r == '>' || r == '"' || r == '\'' || r == '{' || r == '}' || r == 0x7f {
			return false
		}
	}
	return true
}

// firstJSON reads the JSON value at the start of s (after space) and
// returns it and the text after it.
func firstJSON(s string) (json.RawMessage, string, error) {
	d := json.NewDecoder(strings.NewReader(s))
	var v json.RawMessage
	if err := d.Decode(&v); err != nil {
		return nil, s, err
	}
	return v, s[d.InputOffset():], nil
}

const spaces = " \t\r\n"

// isSpace reports whether s is only whitespace.
func isSpace(s string) bool { return strings.TrimLeft(s, spaces) == "" }
