// Package chat renders the chat templates Hugging Face checkpoints ship
// (tokenizer_config.json's chat_template, a Jinja template) into the prompt
// text a model expects, as transformers' apply_chat_template does.
//
//	t, err := chat.CompileBounded(tok.Config.ChatTemplateSource, tok.Config.ChatTemplate, chat.Bounds{})
//	text, err := t.Render([]chat.Message{
//		{Role: "system", Content: "Be brief."},
//		{Role: "user", Content: "Hello!"},
//	}, chat.Options{AddGenerationPrompt: true, BOSToken: tok.Config.BOSToken, EOSToken: tok.Config.EOSToken})
//	ids := tok.Encode(text, false)
//
// Encode the rendered text without adding special tokens: a template writes
// the BOS token itself where the model wants one (bos_token), and adding
// the tokenizer's would double it. The archgen package does this for you.
//
// The template sees messages, add_generation_prompt, bos_token, eos_token,
// tools when Options.Tools is set, and any further variables in
// Options.Vars (enable_thinking, say: what archrun's -chat-template-config
// passes). Messages whose fields go beyond role and content (tool calls,
// reasoning, lists of content parts) put them in Message.Fields, or use
// RenderMaps with the messages as JSON. A raise_exception in the template
// comes back as Render's error.
//
// Templates are Jinja as transformers runs it (github.com/ardanlabs/jinja);
// a Template is safe for concurrent use. A template from a model's files
// is code from elsewhere: CompileBounded renders it in a renderer process
// with bounds on its time, memory, recursion and output (see Bounds), so
// that no template can hang, crash or exhaust the process that asked;
// Compile renders in process, for templates the caller trusts. Values
// reach a renderer as JSON: strings, numbers, booleans, lists and maps as
// they are, other Go types as encoding/json writes them.
package chat

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string
	Content string
	// Fields holds any other keys the template reads (reasoning_content,
	// tool_calls, ...). A "content" entry here replaces Content, for
	// templates that take a list of parts.
	Fields map[string]any
}

// Options are the variables a template sees beside the messages.
type Options struct {
	// AddGenerationPrompt asks the template to end with the opening of an
	// assistant turn.
	AddGenerationPrompt bool
	// BOSToken and EOSToken are the bos_token and eos_token strings.
	BOSToken, EOSToken string
	// Tools, when set, is passed as tools: a list of tool descriptions,
	// each a map or a json.RawMessage (which keeps its key order).
	Tools []any
	// Vars are further variables (enable_thinking, say), as the keyword
	// arguments of apply_chat_template.
	Vars map[string]any
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	t *jinja.Template // in process (Compile)
	// A bounded template (CompileBounded) keeps its source and name for
	// its renderers.
	src, name string
	pool      *pool
}

// Compile parses a chat template that renders in this process, with no
// bound on its work: for templates the caller wrote or checked. Templates
// from a model's files go through CompileBounded.
func Compile(src string) (*Template, error) {
	if src == "" {
		return nil, fmt.Errorf("chat template is empty")
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{t: t}, nil
}

// Render returns the prompt text of a conversation. An error the template
// raises (raise_exception) comes back as the error.
func (t *Template) Render(messages []Message, o Options) (string, error) {
	ms := make([]any, len(messages))
	for i, m := range messages {
		d := map[string]any{"role": m.Role, "content": m.Content}
		for k, v := range m.Fields {
			d[k] = v
		}
		ms[i] = d
	}
	return t.RenderMaps(ms, o)
}

// RenderMaps is Render for messages already in the shape a template reads:
// each a map with "role", "content" and any other keys, or a
// json.RawMessage holding such an object. Values read from JSON keep the
// order of their keys, which tojson prints as transformers does; Go maps
// are read in sorted key order.
func (t *Template) RenderMaps(messages []any, o Options) (string, error) {
	vars := map[string]any{
		"add_generation_prompt": o.AddGenerationPrompt,
		"bos_token":             o.BOSToken,
		"eos_token":             o.EOSToken,
		"messages":              messages,
	}
	if o.Tools != nil {
		vars["tools"] = o.Tools
	}
	for k, v := range o.Vars {
		vars[k] = v
	}
	if t.pool != nil {
		req := &renderRequest{Source: t.src, Vars: make(map[string]json.RawMessage, len(vars))}
		for k, v := range vars {
			var buf bytes.Buffer
			if err := encodeVar(&buf, v); err != nil {
				return "", fmt.Errorf("%s: %w", k, err)
			}
			req.Vars[k] = buf.Bytes()
		}
		return t.pool.call(t.name, req)
	}
	data := make(map[string]jinja.Value, len(vars))
	for k, v := range vars {
		var err error
		if data[k], err = toValue(v); err != nil {
			return "", err
		}
	}
	s, err := t.t.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return s, nil
}
