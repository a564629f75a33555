package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/constrain"
	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generate/batch"
	"github.com/archgen/archgen/tokenizer/chat"
)

// common are the fields both endpoints take.
type common struct {
	Model               *string         `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	Seed                *int64          `json:"seed"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N *int `json:"n"`
	// Speculative false keeps the server's draft model from drafting for
	// the request (-draft-model).
	Speculative *bool `json:"speculative"`
}

type chatRequest struct {
	common
	structured
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Messages           []json.RawMessage `json:"messages"`
	Tools              []json.RawMessage `json:"tools"`
	Logprobs           *bool             `json:"logprobs"`
	TopLogprobs        *int              `json:"top_logprobs"`
	ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs"`
	ReasoningEffort    *string           `json:"reasoning_effort"`
}

type completionRequest struct {
	common
	structured
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
}

// job is a checked request, ready for the engine.
type job struct {
	api          api
	model        string             // the model name the response carries
	promptField  string             // the request's prompt field: messages or prompt
	split        splitter           // nil: the reply is content alone
	responses    *responsesState    // the Responses API's state
	grammar      *constrain.Grammar // the reply's grammar (nil: free text); run frees it
	maxField     string             // the field that set max tokens ("" for the default)
	text         string             // the prompt's text (the rendered chat), for the access log
	req          batch.Request
	stops        []string
	stream       bool
	includeUsage bool
}

// checkModel sets the model name j's response carries: the name the
// request gave where it is the model's id or an alias, the id otherwise;
// with StrictModel another name is refused.
func (s *Server) checkModel(name *string, j *job) *apiError {
	j.model = s.opts.ModelID
	if name == nil || *name == "" {
		return nil
	}
	if *name == s.opts.ModelID || slices.Contains(s.opts.Aliases, *name) {
		j.model = *name
		return nil
	}
	if s.opts.StrictModel {
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("model %q: this server runs %q (GET /v1/models)", *name, s.opts.ModelID)}
	}
	return nil
}

// check reads the fields both endpoints share into j; promptField names
// the prompt's field for a context that is too long.
func (s *Server) check(c *common, j *job, promptField string) *apiError {
	if e := s.checkModel(c.Model, j); e != nil {
		return e
	}
	if c.N != nil && *c.N != 1 {
		return &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: "n", Code: "unsupported_value",
			Message: fmt.Sprintf("n: %d choices asked, this server gives 1 per request", *c.N)}
	}
	var sp generate.Sampling
	if v := c.Temperature; v != nil {
		if *v < 0 {
			return badRequest("temperature", "invalid_value", "temperature: %g is negative", *v)
		}
		sp.Temp = *v
	}
	if v := c.TopP; v != nil {
		if *v <= 0 || *v > 1 {
			return badRequest("top_p", "invalid_value", "top_p: %g is outside (0, 1]", *v)
		}
		sp.TopP = *v
	}
	if v := c.TopK; v != nil {
		if *v < 0 {
			return badRequest("top_k", "invalid_value", "top_k: %d is negative", *v)
		}
		if vocab := s.m.Net.Info().VocabSize; *v >= vocab {
			return badRequest("top_k", "invalid_value", "top_k: %d, want fewer than the vocabulary's %d tokens", *v, vocab)
		}
		sp.TopK = *v
	}
	if v := c.MinP; v != nil {
		if *v < 0 || *v > 1 {
			return badRequest("min_p", "invalid_value", "min_p: %g is outside [0, 1]", *v)
		}
		sp.MinP = *v
	}
	if v := c.RepetitionPenalty; v != nil {
		if *v <= 0 {
			return badRequest("repetition_penalty", "invalid_value", "repetition_penalty: %g is not positive", *v)
		}
		sp.RepetitionPenalty = *v
	}
	if v := c.Seed; v != nil {
		if *v < 0 {
			return badRequest("seed", "invalid_value", "seed: %d is negative", *v)
		}
		sp.Seed = uint64(*v)
	} else if sp.Temp > 0 {
		sp.Seed = rand.Uint64() // each unseeded request draws differently
	}
	if err := sp.Check(s.m.Net.Info().VocabSize); err != nil {
		return badRequest("", "invalid_value", "%v", err)
	}
	j.req.Sampling = sp
	j.req.NoDraft = c.Speculative != nil && !*c.Speculative

	maxTokens, field := s.opts.DefaultMaxTokens, ""
	if c.MaxTokens != nil {
		maxTokens, field = *c.MaxTokens, "max_tokens"
	}
	if c.MaxCompletionTokens != nil {
		maxTokens, field = *c.MaxCompletionTokens, "max_completion_tokens"
	}
	if maxTokens < 1 {
		return badRequest(field, "invalid_value", "%s: %d, want at least 1", field, maxTokens)
	}
	j.maxField = field
	if lim := s.opts.Limits.MaxTokens; lim > 0 && maxTokens > lim {
		if field != "" {
			return over(field, "%s: %d, more than this server generates for a request (%d)", field, maxTokens, lim)
		}
		maxTokens = lim // the server's default budget beyond its own bound
	}
	n := len(j.req.Prompt)
	if lim := s.opts.Limits.PromptTokens; lim > 0 && n > lim {
		return over(promptField, "%s: %d tokens, more than this server takes in a prompt (%d)", promptField, n, lim)
	}
	if limit := s.opts.ContextLength; limit > 0 {
		if n >= limit {
			return badRequest(promptField, "context_length_exceeded",
				"%s: %d tokens, the model's context is %d tokens (the prompt must leave room for at least one more)", promptField, n, limit)
		}
		maxTokens = min(maxTokens, limit-n)
	}
	j.req.MaxTokens = maxTokens
	j.req.StopTokens = s.m.StopTokens

	if len(c.Stop) > 0 && string(c.Stop) != "null" {
		var one string
		if err := json.Unmarshal(c.Stop, &one); err == nil {
			j.stops = []string{one}
		} else if err := json.Unmarshal(c.Stop, &j.stops); err != nil {
			return badRequest("stop", "invalid_type", "stop: want a string or an array of strings")
		}
		if lim := s.opts.Limits.Stops; lim > 0 && len(j.stops) > lim {
			return over("stop", "stop: %d strings, more than this server takes (%d)", len(j.stops), lim)
		}
		for i, st := range j.stops {
			if lim := s.opts.Limits.StopBytes; lim > 0 && len(st) > lim {
				return over("stop", "stop[%d]: %d bytes, longer than this server takes (%d)", i, len(st), lim)
			}
		}
	}
	j.stream = c.Stream
	j.includeUsage = c.StreamOptions != nil && c.StreamOptions.IncludeUsage
	return nil
}

func (s *Server) parseChat(r *chatRequest) (*job, *apiError) {
	if e := s.chatLimits(len(r.Messages), len(r.Tools)); e != nil {
		return nil, e
	}
	msgs, e := parseMessages(r.Messages)
	if e != nil {
		return nil, e
	}
	tools, e := openaiTools(r.Tools)
	if e != nil {
		return nil, e
	}
	tc, e := parseToolChoice(r.ToolChoice, "tool_choice", tools, r.ParallelToolCalls)
	if e != nil {
		return nil, e
	}
	vars := r.ChatTemplateKwargs
	if r.ReasoningEffort != nil {
		if vars == nil {
			vars = map[string]any{}
		}
		vars["reasoning_effort"] = *r.ReasoningEffort
	}
	j, e := s.renderChat(msgs, r.Tools, vars)
	if e != nil {
		return nil, e
	}
	j.api = apiChat
	if r.Logprobs != nil && *r.Logprobs {
		j.req.Logprobs = true
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > batch.MaxTopLogprobs {
			return nil, badRequest("top_logprobs", "invalid_value", "top_logprobs: %d is outside [0, %d]", *r.TopLogprobs, batch.MaxTopLogprobs)
		}
		j.req.TopLogprobs = *r.TopLogprobs
		if j.req.TopLogprobs > 0 {
			j.req.Logprobs = true
		}
	}
	if e := s.check(&r.common, j, "messages"); e != nil {
		return nil, e
	}
	if e := s.shape(j, tools, tc, &r.structured, "response_format"); e != nil {
		return nil, e
	}
	return j, nil
}

// chatLimits refuses a chat without a template to render it, or with more
// messages or tools than the server takes.
func (s *Server) chatLimits(messages, tools int) *apiError {
	if s.m.Template == nil {
		return &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: "messages", Code: "no_chat_template",
			Message: "messages: the model's tokenizer has no chat template (send a prompt to /v1/completions)"}
	}
	if lim := s.opts.Limits.Messages; lim > 0 && messages > lim {
		return over("messages", "messages: %d messages, more than this server takes (%d)", messages, lim)
	}
	if lim := s.opts.Limits.Tools; lim > 0 && tools > lim {
		return over("tools", "tools: %d tools, more than this server takes (%d)", tools, lim)
	}
	return nil
}

// renderChat renders a chat (its tools in the OpenAI form the templates
// read) and encodes it: a job with its prompt.
func (s *Server) renderChat(msgs []archgen.Message, tools []json.RawMessage, vars map[string]any) (*job, *apiError) {
	opts := chat.Options{
		AddGenerationPrompt: true,
		BOSToken:            s.m.Tokenizer.Config.BOSToken,
		EOSToken:            s.m.Tokenizer.Config.EOSToken,
		Vars:                vars,
	}
	for _, t := range tools {
		opts.Tools = append(opts.Tools, t)
	}
	text, err := s.m.Template.Render(msgs, opts)
	var bound *chat.BoundError
	switch {
	case errors.As(err, &bound):
		return nil, &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: "messages", Code: "template_bounds",
			Message: "messages: " + err.Error()}
	case errors.Is(err, chat.ErrRenderer):
		return nil, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "template_renderer", Message: err.Error()}
	case err != nil:
		return nil, badRequest("messages", "template_error", "messages: the chat template failed: %v", err)
	}
	j := &job{promptField: "messages", text: text}
	j.req.Prompt = s.m.Tokenizer.Encode(text, false)
	return j, nil
}

// textContent reads a content that must be text: a string, or an array of
// parts (the Messages API's blocks: noun "block") of the given types, each
// with its text, joined. field names the content for errors.
func textContent(raw json.RawMessage, field, noun string, types ...string) (string, *apiError) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(field, "invalid_type", "%s: want a string or an array of text %ss", field, noun)
	}
	var b strings.Builder
	for k, p := range parts {
		if !slices.Contains(types, p.Type) || p.Text == nil {
			return "", &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error",
				Param: fmt.Sprintf("%s[%d]", field, k), Code: "unsupported_value",
				Message: fmt.Sprintf("%s[%d]: a %s of type %q; this server takes text %ss only", field, k, noun, p.Type, noun)}
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// parseMessages reads the messages, each an object with a role and a
// content (a string, null, or text parts); other keys (tool_calls,
// tool_call_id, name, ...) go to the template as they are.
func parseMessages(raw []json.RawMessage) ([]archgen.Message, *apiError) {
	if len(raw) == 0 {
		return nil, badRequest("messages", "empty_messages", "messages: empty; a chat needs at least one message")
	}
	out := make([]archgen.Message, len(raw))
	for i, r := range raw {
		field := fmt.Sprintf("messages[%d]", i)
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(r, &obj); err != nil || obj == nil {
			return nil, badRequest(field, "invalid_type", "%s: want an object with a role and a content", field)
		}
		var m archgen.Message
		if err := json.Unmarshal(obj["role"], &m.Role); err != nil || m.Role == "" {
			return nil, badRequest(field+".role", "invalid_value", "%s.role: want a non-empty string", field)
		}
		if m.Role == "developer" {
			m.Role = "system"
		}
		if c, ok := obj["content"]; ok && string(c) != "null" {
			var e *apiError
			if m.Content, e = textContent(c, field+".content", "part", "text"); e != nil {
				return nil, e
			}
		}
		for k, v := range obj {
			if k == "role" || k == "content" {
				continue
			}
			var val any
			if err := json.Unmarshal(v, &val); err != nil {
				return nil, badRequest(field+"."+k, "invalid_type", "%s.%s: %v", field, k, err)
			}
			if m.Fields == nil {
				m.Fields = map[string]any{}
			}
			m.Fields[k] = val
		}
		out[i] = m
	}
	return out, nil
}

func (s *Server) parseCompletion(r *completionRequest) (*job, *apiError) {
	j := &job{api: apiCompletions, promptField: "prompt"}
	p := r.Prompt
	if len(p) == 0 || string(p) == "null" {
		return nil, badRequest("prompt", "missing_prompt", "prompt: missing; give a string or an array of token ids")
	}
	var text string
	var texts []string
	var ids []int32
	switch {
	case json.Unmarshal(p, &text) == nil:
	case json.Unmarshal(p, &ids) == nil:
	case json.Unmarshal(p, &texts) == nil:
		if len(texts) != 1 {
			return nil, &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: "prompt", Code: "unsupported_value",
				Message: fmt.Sprintf("prompt: %d prompts in one request; this server takes one", len(texts))}
		}
		text = texts[0]
	default:
		return nil, badRequest("prompt", "invalid_type", "prompt: want a string or an array of token ids")
	}
	if ids != nil {
		vocab := s.m.Net.Info().VocabSize
		for i, id := range ids {
			if id < 0 || int(id) >= vocab {
				return nil, badRequest("prompt", "invalid_value", "prompt: token %d (position %d) is outside the vocabulary of %d", id, i, vocab)
			}
		}
		j.req.Prompt = ids
	} else {
		if text == "" {
			return nil, badRequest("prompt", "empty_prompt", "prompt: empty")
		}
		j.text = text
		enc, err := s.m.EncodePrompt(text)
		if err != nil {
			return nil, badRequest("prompt", "invalid_value", "prompt: %v", err)
		}
		j.req.Prompt = enc
	}
	if len(j.req.Prompt) == 0 {
		return nil, badRequest("prompt", "empty_prompt", "prompt: no tokens")
	}
	if r.Logprobs != nil {
		if *r.Logprobs < 0 || *r.Logprobs > batch.MaxTopLogprobs {
			return nil, badRequest("logprobs", "invalid_value", "logprobs: %d is outside [0, %d]", *r.Logprobs, batch.MaxTopLogprobs)
		}
		j.req.Logprobs, j.req.TopLogprobs = true, *r.Logprobs
	}
	if e := s.check(&r.common, j, "prompt"); e != nil {
		return nil, e
	}
	g, e := s.grammarOf(&r.structured, "response_format")
	if e != nil {
		return nil, e
	}
	j.grammar = g
	return j, nil
}
