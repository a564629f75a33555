// Package reply splits a chat model's streamed reply into content,
// reasoning and tool calls.
//
// A model writes more than the answer: reasoning between markers such as
// <think> and </think>, and tool calls in a markup of its family's own
// (Hermes' <tool_call> JSON, Qwen3-Coder's XML, Mistral's [TOOL_CALLS],
// DeepSeek's <｜tool▁calls▁begin｜>, gpt-oss's harmony channels, ...). A Spec
// names both for one model; Detect reads it from the model's files, never
// from its name: tokenizer_config.json's tool_parser_type where the file
// has one, else the chat template's source, else the vocabulary.
//
//	spec, err := reply.Detect(reply.Inputs{
//		ToolParserType: parserType, // tokenizer_config.json's, if any
//		Template:       tok.Config.ChatTemplate,
//		HasToken:       func(s string) bool { _, ok := tok.TokenToID(s); return ok },
//		SpecialToken: func(s string) (int32, bool) {
//			id, ok := tok.TokenToID(s)
//			return id, ok && tok.IsSpecial(id)
//		},
//	})
//	p := spec.NewParser(reply.ParserOptions{Tools: tools, InReasoning: spec.EndsInReasoning(prompt)})
//	for piece := range pieces {
//		d := p.Push(piece) // d.Content, d.Reasoning, d.Calls
//	}
//	d := p.Finish()
//
// The reply text must keep the text of special tokens (decoded without
// skipping them): most markers are special tokens.
//
// Tool calls are parsed only when the request has tools; without them the
// markup is content, as such a request expects. Reasoning is split either
// way. A call whose markup does not parse comes back as content, unchanged,
// so that nothing the model wrote is lost.
//
// ToolFormat.Grammar writes a grammar in llguidance's Lark dialect that
// forces a reply to be tool calls of the format, for tool_choice
// "required" or a named tool.
package reply

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Spec is what a model writes besides plain content: its tool-call format
// and its reasoning markers.
type Spec struct {
	Tools     *ToolFormat // nil: no known tool-call format
	Reasoning *Reasoning  // nil: no reasoning markers
}

// Reasoning is a reasoning block's markers: the text between Start and End
// is reasoning.
type Reasoning struct{ Start, End string }

// ToolFormat is one tool-call format.
type ToolFormat struct {
	// Name is the format's name, as tokenizer_config.json's
	// tool_parser_type spells it ("json_tools", "mistral", ...).
	Name string

	def *format
	// variant picks one of the format's spellings for Grammar ("" for its
	// default), as Detect read it from the template.
	variant string
	// special gives the id of a marker that is one special token of the
	// vocabulary, which a grammar must name rather than spell.
	special func(string) (int32, bool)
}

// Inputs are what Detect reads.
type Inputs struct {
	// ToolParserType is tokenizer_config.json's tool_parser_type ("" when
	// absent). It names the format outright.
	ToolParserType string
	// Template is the chat template's source.
	Template string
	// HasToken reports whether the vocabulary has s as one token (nil:
	// unknown, and the template alone decides).
	HasToken func(s string) bool
	// SpecialToken gives the id of s where the vocabulary has it as one
	// special token: one that encoding text never yields, so that a
	// grammar names it (<[id]>) instead of spelling it. nil: grammars
	// spell every marker.
	SpecialToken func(s string) (id int32, ok bool)
}

// Detect reads a model's Spec. The only error is a ToolParserType that
// names no known format.
func Detect(in Inputs) (Spec, error) {
	var s Spec
	if in.ToolParserType != "" {
		f, ok := byName[in.ToolParserType]
		if !ok {
			return Spec{}, fmt.Errorf("tool_parser_type %q: unknown format (known: %s)",
				in.ToolParserType, strings.Join(FormatNames(), ", "))
		}
		s.Tools = f.with(in)
	} else {
		s.Tools = detectFormat(in)
	}
	s.Reasoning = detectReasoning(in)
	return s, nil
}

// detectFormat tries every format's template rule, then the vocabulary
// rules.
func detectFormat(in Inputs) *ToolFormat {
	for _, f := range formats {
		if f.detect != nil && f.detect(in) {
			return f.with(in)
		}
	}
	for _, f := range vocabFormats {
		if f.vocab(in) {
			return f.with(in)
		}
	}
	return nil
}

// FormatNames returns the name of every known format, sorted.
func FormatNames() []string {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ByName returns the format of a name. Its grammars spell every marker;
// Detect's formats name the special tokens of the vocabulary.
func ByName(name string) (*ToolFormat, bool) {
	f, ok := byName[name]
	if !ok {
		return nil, false
	}
	return f.with(Inputs{}), true
}

// with is the format as one model's Inputs see it.
func (f *format) with(in Inputs) *ToolFormat {
	t := &ToolFormat{Name: f.name, def: f, special: in.SpecialToken}
	if f.variant != nil {
		t.variant = f.variant(in.Template)
	}
	return t
}

// Tool is one of a request's tools, as the OpenAI API gives it
// ({"type": "function", "function": {name, description, parameters}}).
type Tool struct {
	Name       string
	Parameters json.RawMessage // a JSON schema; nil for none
}

// ToolCall is one call the model made.
type ToolCall struct {
	ID        string // "" here; the server assigns ids
	Name      string
	Arguments string // a JSON object's text, as the OpenAI API carries arguments
}

// Delta is what a piece of the reply adds.
type Delta struct {
	Content, Reasoning string
	Calls              []ToolCall
}

// ParserOptions are one request's settings for a Parser.
type ParserOptions struct {
	// Tools are the request's tools. Formats whose arguments are not JSON
	// (XML, key-value, Python calls) type each value by its tool's
	// parameters schema. With none, tool-call markup stays content.
	Tools []Tool
	// InReasoning says the prompt ended inside an open reasoning block
	// (see Spec.EndsInReasoning), so the reply starts in reasoning.
	InReasoning bool
}

// EndsInReasoning reports whether a rendered prompt ends inside an open
// reasoning block, as templates that end the generation prompt with
// "<think>\n" leave it.
func (s Spec) EndsInReasoning(prompt string) bool {
	r := s.Reasoning
	if r == nil || r.Start == "" {
		return false
	}
	i := strings.LastIndex(prompt, r.Start)
	if i < 0 {
		return false
	}
	return !strings.Contains(prompt[i+len(r.Start):], r.End)
}
