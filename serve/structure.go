package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/archgen/archgen/constrain"
	"github.com/archgen/archgen/tokenizer/chat/reply"
)

// structured are the fields that constrain a reply's form, in the shapes
// the OpenAI API, vLLM and llama-server give them: response_format, a
// GBNF grammar (or llguidance's Lark after a "%llguidance" line), a JSON
// schema, and vLLM's guided_json, guided_regex, guided_choice and
// guided_grammar (Lark). At most one may be given.
type structured struct {
	ResponseFormat json.RawMessage `json:"response_format"`
	Grammar        *string         `json:"grammar"`
	JSONSchema     json.RawMessage `json:"json_schema"`
	GuidedJSON     json.RawMessage `json:"guided_json"`
	GuidedRegex    *string         `json:"guided_regex"`
	GuidedChoice   []string        `json:"guided_choice"`
	GuidedGrammar  *string         `json:"guided_grammar"`
}

// toolChoice is what a request asks of tool calls: none, auto, required
// (at least one call) or one named function; parallel allows several.
type toolChoice struct {
	mode     string // none, auto, required, named
	name     string // for named
	parallel bool
	field    string // the request's field, for errors
}

// modelSpec is the model's tool-call format and reasoning markers, read
// once from its chat template, tokenizer_config.json and vocabulary.
func (s *Server) modelSpec() reply.Spec {
	s.specOnce.Do(func() {
		tok := s.m.Tokenizer
		in := reply.Inputs{ToolParserType: tok.Config.ToolParserType, Template: tok.Config.ChatTemplate,
			HasToken: func(t string) bool { _, ok := tok.TokenToID(t); return ok },
			SpecialToken: func(t string) (int32, bool) {
				id, ok := tok.TokenToID(t)
				return id, ok && tok.IsSpecial(id)
			}}
		spec, err := reply.Detect(in)
		if err != nil {
			s.logf("tokenizer_config.json: %v: tool calls are left as text", err)
			in.ToolParserType = ""
			spec, _ = reply.Detect(in)
		}
		s.spec = spec
	})
	return s.spec
}

// vocabulary is the model's vocabulary as the grammar matcher sees it,
// made on the first constrained request.
func (s *Server) vocabulary() (*constrain.Vocab, error) {
	s.vocabOnce.Do(func() {
		s.vocab, s.vocabErr = constrain.NewVocab(s.m.Tokenizer, s.m.StopTokens)
	})
	return s.vocab, s.vocabErr
}

// compileError is the 400 for a schema or grammar the matcher refused.
func compileError(field, code string, err error) *apiError {
	msg := strings.TrimPrefix(err.Error(), "constrain: ")
	return badRequest(field, code, "%s: %s", field, msg)
}

// given is a grammar a request gives: its field, how to compile it, and
// the error code of one that does not compile.
type given struct {
	field string
	make  func(v *constrain.Vocab) (*constrain.Grammar, error)
	code  string
}

// grammarOf compiles the request's structured field (nil when none is
// given); rfField names the response format's field in the request's API.
func (s *Server) grammarOf(st *structured, rfField string) (*constrain.Grammar, *apiError) {
	var gs []given
	if len(st.ResponseFormat) > 0 && string(st.ResponseFormat) != "null" {
		g, e := responseFormat(st.ResponseFormat, rfField)
		if e != nil {
			return nil, e
		}
		if g != nil {
			gs = append(gs, *g)
		}
	}
	if st.Grammar != nil {
		src := *st.Grammar
		if lark, ok := strings.CutPrefix(src, "%llguidance"); ok {
			gs = append(gs, given{"grammar", func(v *constrain.Vocab) (*constrain.Grammar, error) { return v.Lark(lark) }, "invalid_grammar"})
		} else {
			gs = append(gs, given{"grammar", func(v *constrain.Vocab) (*constrain.Grammar, error) { return v.GBNF(src) }, "invalid_grammar"})
		}
	}
	for _, js := range []struct {
		field string
		raw   json.RawMessage
	}{{"json_schema", st.JSONSchema}, {"guided_json", st.GuidedJSON}} {
		if len(js.raw) > 0 && string(js.raw) != "null" {
			raw := js.raw
			gs = append(gs, given{js.field, func(v *constrain.Vocab) (*constrain.Grammar, error) { return v.JSONSchema(raw) }, "invalid_schema"})
		}
	}
	if st.GuidedRegex != nil {
		re := *st.GuidedRegex
		gs = append(gs, given{"guided_regex", func(v *constrain.Vocab) (*constrain.Grammar, error) { return v.Regex(re) }, "invalid_grammar"})
	}
	if st.GuidedChoice != nil {
		if len(st.GuidedChoice) == 0 {
			return nil, badRequest("guided_choice", "invalid_value", "guided_choice: empty; give the strings the reply may be")
		}
		quoted := make([]string, len(st.GuidedChoice))
		for i, c := range st.GuidedChoice {
			q, _ := json.Marshal(c)
			quoted[i] = string(q)
		}
		lark := "start: " + strings.Join(quoted, " | ")
		gs = append(gs, given{"guided_choice", func(v *constrain.Vocab) (*constrain.Grammar, error) { return v.Lark(lark) }, "invalid_grammar"})
	}
	if st.GuidedGrammar != nil {
		src := *st.GuidedGrammar
		gs = append(gs, given{"guided_grammar", func(v *constrain.Vocab) (*constrain.Grammar, error) { return v.Lark(src) }, "invalid_grammar"})
	}
	switch len(gs) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, badRequest(gs[1].field, "invalid_value", "%s: a request takes one of response_format, grammar, json_schema and the guided_ fields; %s is given too",
			gs[1].field, gs[0].field)
	}
	v, err := s.vocabulary()
	if err != nil {
		return nil, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "constraint_unavailable", Message: err.Error()}
	}
	g, err := gs[0].make(v)
	if err != nil {
		return nil, compileError(gs[0].field, gs[0].code, err)
	}
	return g, nil
}

// responseFormat reads response_format ({"type": "text" | "json_object" |
// "json_schema", "json_schema": {"name", "schema", "strict"}}), or the
// Responses API's text.format ({"type", "name", "schema", "strict"}).
func responseFormat(raw json.RawMessage, field string) (*given, *apiError) {
	var rf struct {
		Type       string          `json:"type"`
		Schema     json.RawMessage `json:"schema"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, badRequest(field, "invalid_type", "%s: want an object with a type", field)
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &given{field, func(v *constrain.Vocab) (*constrain.Grammar, error) { return v.JSONObject() }, "invalid_schema"}, nil
	case "json_schema":
		schema, sf := rf.Schema, field+".schema"
		if rf.JSONSchema != nil {
			schema, sf = rf.JSONSchema.Schema, field+".json_schema.schema"
		}
		if len(schema) == 0 || string(schema) == "null" {
			return nil, badRequest(sf, "invalid_value", "%s: missing; json_schema needs a schema", sf)
		}
		return &given{sf, func(v *constrain.Vocab) (*constrain.Grammar, error) { return v.JSONSchema(schema) }, "invalid_schema"}, nil
	}
	return nil, badRequest(field+".type", "invalid_value", "%s.type: %q, want text, json_object or json_schema", field, rf.Type)
}

// parseToolChoice reads tool_choice in the chat API's shapes ("none",
// "auto", "required", {"type": "function", "function": {"name"}}), the
// Responses API's ({"type": "function", "name"}) and the Messages API's
// ({"type": "auto" | "any" | "tool" | "none", "name",
// "disable_parallel_tool_use"}).
func parseToolChoice(raw json.RawMessage, field string, tools []reply.Tool, parallel *bool) (toolChoice, *apiError) {
	tc := toolChoice{mode: "auto", parallel: parallel == nil || *parallel, field: field}
	if len(tools) == 0 {
		tc.mode = "none"
	}
	if len(raw) == 0 || string(raw) == "null" {
		return tc, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "none", "auto", "required":
			tc.mode = mode
		default:
			return tc, badRequest(field, "invalid_value", "%s: %q, want none, auto, required or a function", field, mode)
		}
	} else {
		var obj struct {
			Type     string `json:"type"`
			Name     string `json:"name"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
			DisableParallel *bool `json:"disable_parallel_tool_use"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return tc, badRequest(field, "invalid_type", "%s: want a string or an object", field)
		}
		if obj.DisableParallel != nil {
			tc.parallel = !*obj.DisableParallel
		}
		switch obj.Type {
		case "auto", "none":
			tc.mode = obj.Type
		case "any":
			tc.mode = "required"
		case "function", "tool":
			tc.mode, tc.name = "named", obj.Name
			if obj.Function != nil {
				tc.name = obj.Function.Name
			}
			if tc.name == "" {
				return tc, badRequest(field, "invalid_value", "%s: a function choice needs the function's name", field)
			}
		default:
			return tc, badRequest(field+".type", "invalid_value", "%s.type: %q, want function (or auto, any, tool, none)", field, obj.Type)
		}
	}
	if tc.mode == "named" && !slices.ContainsFunc(tools, func(t reply.Tool) bool { return t.Name == tc.name }) {
		return tc, badRequest(field, "invalid_value", "%s: function %q is not among the request's tools", field, tc.name)
	}
	if (tc.mode == "required" || tc.mode == "named") && len(tools) == 0 {
		return tc, badRequest(field, "invalid_value", "%s: %s needs tools", field, tc.mode)
	}
	return tc, nil
}

// openaiTools reads the chat API's tools ({"type": "function", "function":
// {"name", "description", "parameters"}}) for the reply parser.
func openaiTools(raw []json.RawMessage) ([]reply.Tool, *apiError) {
	var out []reply.Tool
	for i, t := range raw {
		field := fmt.Sprintf("tools[%d]", i)
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &tool); err != nil {
			return nil, badRequest(field, "invalid_type", "%s: want an object", field)
		}
		if tool.Type != "" && tool.Type != "function" {
			return nil, &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: field + ".type", Code: "unsupported_value",
				Message: fmt.Sprintf("%s.type: %q; this server runs function tools alone", field, tool.Type)}
		}
		if tool.Function == nil || tool.Function.Name == "" {
			return nil, badRequest(field+".function.name", "invalid_value", "%s.function.name: want a non-empty string", field)
		}
		params := tool.Function.Parameters
		if string(params) == "null" {
			params = nil
		}
		out = append(out, reply.Tool{Name: tool.Function.Name, Parameters: params})
	}
	return out, nil
}

// shape sets j's reply parser and constraint: the tool-call format's
// parser where the request has tools (and the reasoning markers' where the
// model has them), and a grammar from the structured fields or a required
// tool choice.
func (s *Server) shape(j *job, tools []reply.Tool, tc toolChoice, st *structured, rfField string) *apiError {
	spec := s.modelSpec()
	g, e := s.grammarOf(st, rfField)
	if e != nil {
		return e
	}
	if tc.mode == "required" || tc.mode == "named" {
		if g != nil {
			g.Free()
			return badRequest(tc.field, "invalid_value", "%s: %s forces tool calls, which a response_format or grammar given too would contradict", tc.field, tc.mode)
		}
		if spec.Tools == nil {
			return &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: tc.field, Code: "unsupported_value",
				Message: fmt.Sprintf("%s: %s needs the model's tool-call format, and its chat template writes calls in none this server knows (%s); tool_choice auto leaves the reply as text",
					tc.field, tc.mode, strings.Join(reply.FormatNames(), ", "))}
		}
		// A named function is called once, as the OpenAI API forces it.
		lark, err := spec.Tools.Grammar(tools, tc.name, tc.parallel && tc.mode == "required", spec.Reasoning)
		if err != nil {
			return &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: tc.field, Code: "unsupported_value",
				Message: fmt.Sprintf("%s: %v", tc.field, err)}
		}
		v, err := s.vocabulary()
		if err != nil {
			return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "constraint_unavailable", Message: err.Error()}
		}
		if g, err = v.Lark(lark); err != nil {
			return compileError("tools", "invalid_schema", err)
		}
	}
	j.grammar = g
	parse := tc.mode != "none" && spec.Tools != nil
	if !parse && spec.Reasoning == nil {
		return nil
	}
	o := reply.ParserOptions{InReasoning: spec.EndsInReasoning(j.text)}
	if parse {
		o.Tools = tools
	}
	prefix := "call_"
	if j.api == apiMessages {
		prefix = "toolu_"
	}
	j.split = &replySplit{p: spec.NewParser(o), prefix: prefix}
	return nil
}

// replySplit is a splitter on the reply package's parser; it gives each
// call an id.
type replySplit struct {
	p      *reply.Parser
	prefix string
}

func (r *replySplit) push(text string) delta { return r.conv(r.p.Push(text)) }
func (r *replySplit) finish() delta          { return r.conv(r.p.Finish()) }

func (r *replySplit) conv(d reply.Delta) delta {
	out := delta{content: d.Content, reasoning: d.Reasoning}
	for _, c := range d.Calls {
		out.calls = append(out.calls, toolCall{id: randomID(r.prefix), name: c.Name, arguments: c.Arguments})
	}
	return out
}

// specState is the Server's lazily read model facts for structured replies.
type specState struct {
	specOnce  sync.Once
	spec      reply.Spec
	vocabOnce sync.Once
	vocab     *constrain.Vocab
	vocabErr  error
}
