// Package chat renders the chat templates Hugging Face checkpoints ship
// (tokenizer_config.json's chat_template, a Jinja template) into the prompt
// text a model expects, as transformers' apply_chat_template does.
package chat

import (
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
	// Tools, when set, is passed as tools (a list of JSON-like values).
	Tools []any
	// Vars are further variables (enable_thinking, say), as the keyword
	// arguments of apply_chat_template.
	Vars map[string]any
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	t *jinja.Template
}

// Compile parses a chat template.
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
// each a map with "role", "content" and any other keys.
func (t *Template) RenderMaps(messages []any, o Options) (string, error) {
	data := map[string]any{
		"messages":              messages,
		"add_generation_prompt": o.AddGenerationPrompt,
		"bos_token":             o.BOSToken,
		"eos_token":             o.EOSToken,
	}
	if o.Tools != nil {
		data["tools"] = o.Tools
	}
	for k, v := range o.Vars {
		data[k] = v
	}
	s, err := t.t.Render(data)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return s, nil
}
