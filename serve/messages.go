package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/tokenizer/chat/reply"
)

// messagesRequest is a request to POST /v1/messages, the Anthropic
// Messages API.
type messagesRequest struct {
	Model         *string           `json:"model"`
	MaxTokens     *int              `json:"max_tokens"`
	System        json.RawMessage   `json:"system"`
	Messages      []json.RawMessage `json:"messages"`
	StopSequences []string          `json:"stop_sequences"`
	Stream        bool              `json:"stream"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	Tools         []json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage   `json:"tool_choice"`
	Thinking      *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	Metadata json.RawMessage `json:"metadata"`
}

// anthropicTool is a tool as the Messages API gives it.
type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

func (s *Server) parseMessagesRequest(r *messagesRequest) (*job, *apiError) {
	if e := s.chatLimits(len(r.Messages), len(r.Tools)); e != nil {
		return nil, e
	}
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "empty_messages", "messages: empty; a conversation needs at least one message")
	}
	var msgs []archgen.Message
	if len(r.System) > 0 && string(r.System) != "null" {
		text, e := textContent(r.System, "system", "block", "text")
		if e != nil {
			return nil, e
		}
		msgs = append(msgs, archgen.Message{Role: "system", Content: text})
	}
	for i, raw := range r.Messages {
		m, e := anthropicMessage(raw, fmt.Sprintf("messages[%d]", i))
		if e != nil {
			return nil, e
		}
		msgs = append(msgs, m...)
	}
	tools := make([]json.RawMessage, len(r.Tools))
	var rtools []reply.Tool
	for i, raw := range r.Tools {
		field := fmt.Sprintf("tools[%d]", i)
		var t anthropicTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, badRequest(field, "invalid_type", "%s: want an object with a name and an input_schema", field)
		}
		if t.Name == "" {
			return nil, badRequest(field+".name", "invalid_value", "%s.name: want a non-empty string", field)
		}
		fn := map[string]any{"name": t.Name}
		if t.Description != "" {
			fn["description"] = t.Description
		}
		if len(t.InputSchema) > 0 {
			fn["parameters"] = t.InputSchema
		}
		tools[i], _ = json.Marshal(map[string]any{"type": "function", "function": fn})
		params := t.InputSchema
		if string(params) == "null" {
			params = nil
		}
		rtools = append(rtools, reply.Tool{Name: t.Name, Parameters: params})
	}
	tc, e := parseToolChoice(r.ToolChoice, "tool_choice", rtools, nil)
	if e != nil {
		return nil, e
	}
	var vars map[string]any
	if r.Thinking != nil {
		switch r.Thinking.Type {
		case "enabled", "adaptive":
			vars = map[string]any{"enable_thinking": true}
		case "disabled":
			vars = map[string]any{"enable_thinking": false}
		default:
			return nil, badRequest("thinking.type", "invalid_value", "thinking.type: %q, want enabled, adaptive or disabled", r.Thinking.Type)
		}
	}
	j, e := s.renderChat(msgs, tools, vars)
	if e != nil {
		return nil, e
	}
	j.api = apiMessages
	c := common{Model: r.Model, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, Stream: r.Stream}
	if r.StopSequences != nil {
		c.Stop, _ = json.Marshal(r.StopSequences)
	}
	if e := s.check(&c, j, "messages"); e != nil {
		if e.Param == "stop" {
			e.Param = "stop_sequences"
			e.Message = strings.Replace(e.Message, "stop", "stop_sequences", 1)
		}
		return nil, e
	}
	if e := s.shape(j, rtools, tc, &structured{}, ""); e != nil {
		return nil, e
	}
	return j, nil
}

// anthropicMessage turns one Messages API message into the messages chat
// templates read: its text as content, tool_use blocks as tool_calls,
// thinking as reasoning_content, and each tool_result block as a message
// of role tool (before the message's text, as the API orders them).
func anthropicMessage(raw json.RawMessage, field string) ([]archgen.Message, *apiError) {
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badRequest(field, "invalid_type", "%s: want an object with a role and a content", field)
	}
	if m.Role != "user" && m.Role != "assistant" {
		return nil, badRequest(field+".role", "invalid_value", "%s.role: %q, want user or assistant", field, m.Role)
	}
	var text string
	if json.Unmarshal(m.Content, &text) == nil {
		return []archgen.Message{{Role: m.Role, Content: text}}, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, badRequest(field+".content", "invalid_type", "%s.content: want a string or an array of content blocks", field)
	}
	var out []archgen.Message
	var b, thinking strings.Builder
	var calls []any
	for k, raw := range blocks {
		bf := fmt.Sprintf("%s.content[%d]", field, k)
		var bl struct {
			Type      string          `json:"type"`
			Text      *string         `json:"text"`
			Thinking  string          `json:"thinking"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if err := json.Unmarshal(raw, &bl); err != nil {
			return nil, badRequest(bf, "invalid_type", "%s: want a content block object", bf)
		}
		switch bl.Type {
		case "text":
			if bl.Text == nil {
				return nil, badRequest(bf+".text", "invalid_type", "%s.text: want a string", bf)
			}
			b.WriteString(*bl.Text)
		case "thinking":
			thinking.WriteString(bl.Thinking)
		case "redacted_thinking":
		case "tool_use":
			if m.Role != "assistant" || bl.Name == "" {
				return nil, badRequest(bf, "invalid_value", "%s: a tool_use block belongs to an assistant message and needs a name", bf)
			}
			var input any = map[string]any{}
			if len(bl.Input) > 0 {
				if err := json.Unmarshal(bl.Input, &input); err != nil {
					return nil, badRequest(bf+".input", "invalid_type", "%s.input: want an object", bf)
				}
			}
			calls = append(calls, map[string]any{"id": bl.ID, "type": "function",
				"function": map[string]any{"name": bl.Name, "arguments": input}})
		case "tool_result":
			if m.Role != "user" {
				return nil, badRequest(bf, "invalid_value", "%s: a tool_result block belongs to a user message", bf)
			}
			content := ""
			if len(bl.Content) > 0 && string(bl.Content) != "null" {
				var e *apiError
				if content, e = textContent(bl.Content, bf+".content", "block", "text"); e != nil {
					return nil, e
				}
			}
			out = append(out, archgen.Message{Role: "tool", Content: content, Fields: map[string]any{"tool_call_id": bl.ToolUseID}})
		default:
			return nil, &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: bf + ".type", Code: "unsupported_value",
				Message: fmt.Sprintf("%s: a block of type %q; this server takes text, thinking, tool_use and tool_result blocks", bf, bl.Type)}
		}
	}
	if b.Len() > 0 || calls != nil || thinking.Len() > 0 || len(out) == 0 {
		msg := archgen.Message{Role: m.Role, Content: b.String()}
		if calls != nil || thinking.Len() > 0 {
			msg.Fields = map[string]any{}
		}
		if calls != nil {
			msg.Fields["tool_calls"] = calls
		}
		if thinking.Len() > 0 {
			msg.Fields["reasoning_content"] = thinking.String()
		}
		out = append(out, msg)
	}
	return out, nil
}

// countTokens answers POST /v1/messages/count_tokens: the prompt's tokens
// once rendered.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if e := s.decode(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.MaxTokens == nil {
		one := 1
		req.MaxTokens = &one
	}
	j, e := s.parseMessagesRequest(&req)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(j.req.Prompt)})
}

// messagesWriter writes Messages API responses: a message object, or the
// stream of message_start, content blocks and their deltas, message_delta
// and message_stop.
type messagesWriter struct {
	o      *output
	blocks []map[string]any // whole: the content so far
	open   string           // streamed: the open block's type ("" for none)
	index  int              // streamed: the open block's index (next: index+1)
}

func newMessagesWriter(o *output) *messagesWriter {
	m := &messagesWriter{o: o, index: -1}
	if o.j.stream {
		msg := m.message(nil, nil, "")
		msg["usage"] = map[string]any{"input_tokens": len(o.j.req.Prompt), "output_tokens": 0}
		o.event("message_start", map[string]any{"type": "message_start", "message": msg})
	}
	return m
}

// message is the message object, its content and stop as given.
func (m *messagesWriter) message(content []map[string]any, stopReason, stopSeq any) map[string]any {
	if content == nil {
		content = []map[string]any{}
	}
	return map[string]any{"id": m.o.id, "type": "message", "role": "assistant", "model": m.o.j.model,
		"content": content, "stop_reason": stopReason, "stop_sequence": stopSeq}
}

func (m *messagesWriter) add(d delta, _ []tokenLogprob) {
	if d.reasoning != "" {
		m.text("thinking", d.reasoning)
	}
	if d.content != "" {
		m.text("text", d.content)
	}
	for _, tc := range d.calls {
		var input any = map[string]any{}
		_ = json.Unmarshal([]byte(tc.arguments), &input)
		if !m.o.j.stream {
			m.blocks = append(m.blocks, map[string]any{"type": "tool_use", "id": tc.id, "name": tc.name, "input": input})
			continue
		}
		m.close()
		m.index++
		m.o.event("content_block_start", map[string]any{"type": "content_block_start", "index": m.index,
			"content_block": map[string]any{"type": "tool_use", "id": tc.id, "name": tc.name, "input": map[string]any{}}})
		m.o.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": m.index,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": tc.arguments}})
		m.open = "tool_use"
		m.close()
	}
}

// text adds text to a block of kind text or thinking, starting one where
// the last block is of another kind.
func (m *messagesWriter) text(kind, text string) {
	if !m.o.j.stream {
		if n := len(m.blocks); n > 0 && m.blocks[n-1]["type"] == kind {
			m.blocks[n-1][kind] = m.blocks[n-1][kind].(string) + text
			return
		}
		m.blocks = append(m.blocks, map[string]any{"type": kind, kind: text})
		return
	}
	if m.open != kind {
		m.close()
		m.index++
		block := map[string]any{"type": kind, kind: ""}
		if kind == "thinking" {
			block["signature"] = ""
		}
		m.o.event("content_block_start", map[string]any{"type": "content_block_start", "index": m.index, "content_block": block})
		m.open = kind
	}
	m.o.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": m.index,
		"delta": map[string]any{"type": kind + "_delta", kind: text}})
}

// close ends the open block, if one is.
func (m *messagesWriter) close() {
	if m.open == "" {
		return
	}
	m.o.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": m.index})
	m.open = ""
}

// stopReason is the Messages API's name for how the reply ended.
func (e ending) stopReason() string {
	switch {
	case e.reason == "length":
		return "max_tokens"
	case e.reason == "tool_calls":
		return "tool_use"
	case e.stopSeq != "":
		return "stop_sequence"
	}
	return "end_turn"
}

func (m *messagesWriter) end(e ending) {
	var stopSeq any
	if e.stopSeq != "" {
		stopSeq = e.stopSeq
	}
	usage := map[string]any{"input_tokens": e.prompt, "output_tokens": e.completion, "cache_read_input_tokens": e.cached,
		"cache_creation_input_tokens": 0}
	if !m.o.j.stream {
		for _, b := range m.blocks {
			if b["type"] == "thinking" {
				b["signature"] = ""
			}
		}
		msg := m.message(m.blocks, e.stopReason(), stopSeq)
		msg["usage"] = usage
		writeJSON(m.o.w, http.StatusOK, msg)
		return
	}
	m.close()
	m.o.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": e.stopReason(), "stop_sequence": stopSeq}, "usage": usage})
	m.o.event("message_stop", map[string]any{"type": "message_stop"})
}

func (m *messagesWriter) streamError(e *apiError) {
	m.o.event("error", map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(e.Status), "message": e.Message}})
}

// anthropicErrorType is the Messages API's error type for a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}
