package serve

import (
	"container/list"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/generate/batch"
	"github.com/archgen/archgen/tokenizer/chat/reply"
)

// responsesRequest is a request to POST /v1/responses, the Responses API.
type responsesRequest struct {
	Model              *string           `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	TopLogprobs        *int              `json:"top_logprobs"`
	Stream             bool              `json:"stream"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Store              *bool             `json:"store"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Text               json.RawMessage   `json:"text"`
	Reasoning          *struct {
		Effort *string `json:"effort"`
	} `json:"reasoning"`
	Metadata json.RawMessage `json:"metadata"`
	User     *string         `json:"user"`
}

// responseTool is a function tool as the Responses API gives it (flat,
// where the chat API nests it under "function").
type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// responsesState is what a Responses API job carries beside the prompt: the
// conversation to keep for a later previous_response_id (without the
// instructions, which do not carry over), and the request's fields the
// response object repeats.
type responsesState struct {
	conversation []archgen.Message
	store        bool
	echo         map[string]any
}

func (s *Server) parseResponses(r *responsesRequest) (*job, *apiError) {
	var msgs []archgen.Message
	if r.PreviousResponseID != nil && *r.PreviousResponseID != "" {
		prev, ok := s.responses.get(*r.PreviousResponseID)
		if !ok {
			return nil, badRequest("previous_response_id", "previous_response_not_found",
				"previous_response_id: no response %q is kept here (responses are kept in memory, the most recent %d, unless store is false)",
				*r.PreviousResponseID, s.responses.max)
		}
		msgs = append(msgs, prev.conversation...)
	}
	input, e := responseInput(r.Input)
	if e != nil {
		return nil, e
	}
	msgs = append(msgs, input...)
	if e := s.chatLimits(len(msgs), len(r.Tools)); e != nil {
		return nil, e
	}
	tools := make([]json.RawMessage, 0, len(r.Tools))
	var rtools []reply.Tool
	for i, raw := range r.Tools {
		field := fmt.Sprintf("tools[%d]", i)
		var t responseTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, badRequest(field, "invalid_type", "%s: want an object with a type and a name", field)
		}
		if t.Type != "function" {
			return nil, &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: field + ".type", Code: "unsupported_value",
				Message: fmt.Sprintf("%s.type: %q; this server runs function tools alone", field, t.Type)}
		}
		if t.Name == "" {
			return nil, badRequest(field+".name", "invalid_value", "%s.name: want a non-empty string", field)
		}
		fn := map[string]any{"name": t.Name}
		if t.Description != "" {
			fn["description"] = t.Description
		}
		if len(t.Parameters) > 0 {
			fn["parameters"] = t.Parameters
		}
		data, _ := json.Marshal(map[string]any{"type": "function", "function": fn})
		tools = append(tools, data)
		params := t.Parameters
		if string(params) == "null" {
			params = nil
		}
		rtools = append(rtools, reply.Tool{Name: t.Name, Parameters: params})
	}
	tc, e := parseToolChoice(r.ToolChoice, "tool_choice", rtools, r.ParallelToolCalls)
	if e != nil {
		return nil, e
	}
	var st structured
	if len(r.Text) > 0 && string(r.Text) != "null" {
		var text struct {
			Format json.RawMessage `json:"format"`
		}
		if err := json.Unmarshal(r.Text, &text); err != nil {
			return nil, badRequest("text", "invalid_type", "text: want an object with a format")
		}
		st.ResponseFormat = text.Format
	}
	prompt := msgs
	if r.Instructions != nil && *r.Instructions != "" {
		prompt = append([]archgen.Message{{Role: "system", Content: *r.Instructions}}, msgs...)
	}
	var vars map[string]any
	if r.Reasoning != nil && r.Reasoning.Effort != nil {
		vars = map[string]any{"reasoning_effort": *r.Reasoning.Effort}
	}
	j, e := s.renderChat(prompt, tools, vars)
	if e != nil {
		return nil, e
	}
	j.api = apiResponses
	j.promptField = "input"
	c := common{Model: r.Model, MaxTokens: r.MaxOutputTokens, Temperature: r.Temperature, TopP: r.TopP, Stream: r.Stream}
	if e := s.check(&c, j, "input"); e != nil {
		if e.Param == "max_tokens" {
			e.Param = "max_output_tokens"
			e.Message = strings.Replace(e.Message, "max_tokens", "max_output_tokens", 1)
		}
		return nil, e
	}
	if j.maxField == "max_tokens" {
		j.maxField = "max_output_tokens"
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > batch.MaxTopLogprobs {
			return nil, badRequest("top_logprobs", "invalid_value", "top_logprobs: %d is outside [0, %d]", *r.TopLogprobs, batch.MaxTopLogprobs)
		}
		j.req.Logprobs, j.req.TopLogprobs = true, *r.TopLogprobs
	}
	rs := &responsesState{conversation: msgs, store: r.Store == nil || *r.Store, echo: map[string]any{
		"instructions": r.Instructions, "max_output_tokens": r.MaxOutputTokens, "temperature": r.Temperature, "top_p": r.TopP,
		"previous_response_id": r.PreviousResponseID, "parallel_tool_calls": r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		"tools": rawOr(r.Tools, []any{}), "tool_choice": rawOrValue(r.ToolChoice, "auto"), "text": rawOrValue(r.Text, map[string]any{"format": map[string]any{"type": "text"}}),
		"metadata": rawOrValue(r.Metadata, map[string]any{}), "store": r.Store == nil || *r.Store, "truncation": "disabled",
		"top_logprobs": r.TopLogprobs, "user": r.User,
		"reasoning": map[string]any{"effort": nil, "summary": nil},
	}}
	if r.Reasoning != nil {
		rs.echo["reasoning"] = map[string]any{"effort": r.Reasoning.Effort, "summary": nil}
	}
	j.responses = rs
	if e := s.shape(j, rtools, tc, &st, "text.format"); e != nil {
		return nil, e
	}
	return j, nil
}

func rawOr(v []json.RawMessage, def any) any {
	if v == nil {
		return def
	}
	return v
}

func rawOrValue(v json.RawMessage, def any) any {
	if len(v) == 0 || string(v) == "null" {
		return def
	}
	return v
}

// responseInput turns the Responses API's input (a string, or items:
// messages, function calls, their outputs, reasoning) into the messages
// chat templates read.
func responseInput(raw json.RawMessage) ([]archgen.Message, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "missing_input", "input: missing; give a string or an array of input items")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []archgen.Message{{Role: "user", Content: text}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "invalid_type", "input: want a string or an array of input items")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "empty_input", "input: empty; a response needs at least one input item")
	}
	var out []archgen.Message
	// lastAssistant is the assistant message function calls and reasoning
	// attach to, while no other message has come after it.
	lastAssistant := func() *archgen.Message {
		if n := len(out); n > 0 && out[n-1].Role == "assistant" {
			return &out[n-1]
		}
		out = append(out, archgen.Message{Role: "assistant"})
		return &out[len(out)-1]
	}
	for i, raw := range items {
		field := fmt.Sprintf("input[%d]", i)
		var it struct {
			Type      string          `json:"type"`
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			CallID    string          `json:"call_id"`
			Name      string          `json:"name"`
			Arguments string          `json:"arguments"`
			Output    json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, badRequest(field, "invalid_type", "%s: want an input item object", field)
		}
		switch {
		case it.Type == "message" || (it.Type == "" && it.Role != ""):
			role := it.Role
			switch role {
			case "developer":
				role = "system"
			case "user", "assistant", "system":
			default:
				return nil, badRequest(field+".role", "invalid_value", "%s.role: %q, want user, assistant, system or developer", field, it.Role)
			}
			content, e := textContent(it.Content, field+".content", "part", "input_text", "output_text", "text")
			if e != nil {
				return nil, e
			}
			out = append(out, archgen.Message{Role: role, Content: content})
		case it.Type == "function_call":
			if it.Name == "" {
				return nil, badRequest(field+".name", "invalid_value", "%s.name: want a non-empty string", field)
			}
			var args any = map[string]any{}
			if it.Arguments != "" && json.Unmarshal([]byte(it.Arguments), &args) != nil {
				return nil, badRequest(field+".arguments", "invalid_value", "%s.arguments: not a JSON object's text", field)
			}
			m := lastAssistant()
			if m.Fields == nil {
				m.Fields = map[string]any{}
			}
			calls, _ := m.Fields["tool_calls"].([]any)
			m.Fields["tool_calls"] = append(calls, map[string]any{"id": it.CallID, "type": "function",
				"function": map[string]any{"name": it.Name, "arguments": args}})
		case it.Type == "function_call_output":
			content, e := textContent(it.Output, field+".output", "part", "input_text", "output_text", "text")
			if e != nil {
				return nil, e
			}
			out = append(out, archgen.Message{Role: "tool", Content: content, Fields: map[string]any{"tool_call_id": it.CallID}})
		case it.Type == "reasoning":
			var r struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			_ = json.Unmarshal(raw, &r)
			var b strings.Builder
			for _, c := range r.Content {
				b.WriteString(c.Text)
			}
			if b.Len() > 0 {
				m := lastAssistant()
				if m.Fields == nil {
					m.Fields = map[string]any{}
				}
				m.Fields["reasoning_content"] = b.String()
			}
		default:
			return nil, &apiError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: field + ".type", Code: "unsupported_value",
				Message: fmt.Sprintf("%s.type: %q; this server takes message, function_call, function_call_output and reasoning items", field, it.Type)}
		}
	}
	return out, nil
}

// responseStore keeps recent responses, by id, for previous_response_id
// and GET /v1/responses/{id}: the most recent max of them.
type responseStore struct {
	mu    sync.Mutex
	max   int
	order *list.List // of string ids, most recent first
	byID  map[string]*storedResponse
}

type storedResponse struct {
	el           *list.Element
	conversation []archgen.Message // input and output, without instructions
	object       map[string]any
}

func newResponseStore(max int) *responseStore {
	return &responseStore{max: max, order: list.New(), byID: map[string]*storedResponse{}}
}

func (rs *responseStore) put(id string, conv []archgen.Message, object map[string]any) {
	if rs.max <= 0 {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	sr := &storedResponse{conversation: conv, object: object}
	sr.el = rs.order.PushFront(id)
	rs.byID[id] = sr
	for rs.order.Len() > rs.max {
		last := rs.order.Back()
		delete(rs.byID, last.Value.(string))
		rs.order.Remove(last)
	}
}

func (rs *responseStore) get(id string) (*storedResponse, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	sr, ok := rs.byID[id]
	if ok {
		rs.order.MoveToFront(sr.el)
	}
	return sr, ok
}

func (rs *responseStore) remove(id string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	sr, ok := rs.byID[id]
	if ok {
		rs.order.Remove(sr.el)
		delete(rs.byID, id)
	}
	return ok
}

// getResponse answers GET /v1/responses/{id}.
func (s *Server) getResponse(w http.ResponseWriter, r *http.Request) {
	sr, ok := s.responses.get(r.PathValue("id"))
	if !ok {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "response_id", Code: "response_not_found",
			Message: fmt.Sprintf("no response %q is kept here", r.PathValue("id"))})
		return
	}
	writeJSON(w, http.StatusOK, sr.object)
}

// deleteResponse answers DELETE /v1/responses/{id}.
func (s *Server) deleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.responses.remove(id) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "response_id", Code: "response_not_found",
			Message: fmt.Sprintf("no response %q is kept here", id)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response.deleted", "deleted": true})
}

// randomID is prefix and 24 random hex digits.
func randomID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// responsesWriter writes Responses API output: a response object, or its
// stream of events (response.created, output items with their parts and
// deltas, response.completed or response.incomplete).
type responsesWriter struct {
	o     *output
	st    *responsesState
	seq   int
	items []map[string]any // output items so far
	open  string           // the last item's type while it takes deltas ("" for none)
	text  strings.Builder  // the open item's text
	lps   []any            // the open message's logprobs
}

func newResponsesWriter(o *output) *responsesWriter {
	rw := &responsesWriter{o: o, st: o.j.responses}
	if o.j.stream {
		resp := rw.object("in_progress", nil)
		rw.send("response.created", map[string]any{"response": resp})
		rw.send("response.in_progress", map[string]any{"response": resp})
	}
	return rw
}

func (rw *responsesWriter) send(kind string, fields map[string]any) {
	fields["type"] = kind
	fields["sequence_number"] = rw.seq
	rw.seq++
	rw.o.event(kind, fields)
}

// object is the response object with the items so far.
func (rw *responsesWriter) object(status string, e *ending) map[string]any {
	items := rw.items
	if items == nil {
		items = []map[string]any{}
	}
	obj := map[string]any{"id": rw.o.id, "object": "response", "created_at": rw.o.created, "status": status,
		"model": rw.o.j.model, "output": items, "error": nil, "incomplete_details": nil, "usage": nil}
	for k, v := range rw.st.echo {
		obj[k] = v
	}
	if e != nil {
		reasoning := 0
		obj["usage"] = map[string]any{
			"input_tokens": e.prompt, "input_tokens_details": map[string]any{"cached_tokens": e.cached, "cache_write_tokens": 0},
			"output_tokens": e.completion, "output_tokens_details": map[string]any{"reasoning_tokens": reasoning},
			"total_tokens": e.prompt + e.completion,
		}
		if e.reason == "length" {
			obj["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
		}
	}
	return obj
}

func (rw *responsesWriter) add(d delta, lps []tokenLogprob) {
	if d.reasoning != "" {
		rw.textItem("reasoning", d.reasoning, nil)
	}
	if d.content != "" || (lps != nil && d.reasoning == "" && len(d.calls) == 0) {
		rw.textItem("message", d.content, lps)
	}
	for _, tc := range d.calls {
		rw.closeItem()
		item := map[string]any{"type": "function_call", "id": randomID("fc_"), "call_id": tc.id, "name": tc.name,
			"arguments": tc.arguments, "status": "completed"}
		rw.items = append(rw.items, item)
		if rw.o.j.stream {
			idx := len(rw.items) - 1
			added := map[string]any{}
			for k, v := range item {
				added[k] = v
			}
			added["arguments"], added["status"] = "", "in_progress"
			rw.send("response.output_item.added", map[string]any{"output_index": idx, "item": added})
			rw.send("response.function_call_arguments.delta", map[string]any{"item_id": item["id"], "output_index": idx, "delta": tc.arguments})
			rw.send("response.function_call_arguments.done", map[string]any{"item_id": item["id"], "output_index": idx,
				"name": tc.name, "arguments": tc.arguments})
			rw.send("response.output_item.done", map[string]any{"output_index": idx, "item": item})
		}
	}
}

// textItem adds text to an item of kind message or reasoning, opening one
// where the last item is of another kind.
func (rw *responsesWriter) textItem(kind, text string, lps []tokenLogprob) {
	if rw.open != kind {
		rw.closeItem()
		item := map[string]any{"type": kind}
		switch kind {
		case "message":
			item["id"], item["role"], item["status"], item["content"] = randomID("msg_"), "assistant", "in_progress", []any{}
		case "reasoning":
			item["id"], item["summary"], item["content"], item["status"] = randomID("rs_"), []any{}, []any{}, "in_progress"
		}
		rw.items = append(rw.items, item)
		rw.open = kind
		rw.text.Reset()
		rw.lps = []any{}
		if rw.o.j.stream {
			idx := len(rw.items) - 1
			rw.send("response.output_item.added", map[string]any{"output_index": idx, "item": item})
			if kind == "message" {
				rw.send("response.content_part.added", map[string]any{"item_id": item["id"], "output_index": idx, "content_index": 0,
					"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}})
			}
		}
	}
	rw.text.WriteString(text)
	lpv := rw.logprobs(lps)
	rw.lps = append(rw.lps, lpv...)
	if rw.o.j.stream {
		idx := len(rw.items) - 1
		id := rw.items[idx]["id"]
		if kind == "message" {
			rw.send("response.output_text.delta", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "delta": text, "logprobs": lpv})
		} else {
			rw.send("response.reasoning_text.delta", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "delta": text})
		}
	}
}

// logprobs is the Responses API's form of tokens' logprobs.
func (rw *responsesWriter) logprobs(lps []tokenLogprob) []any {
	out := []any{}
	for _, lp := range lps {
		top := []any{}
		for _, t := range lp.top {
			top = append(top, map[string]any{"token": rw.o.s.m.Tokenizer.Decode([]int32{t.Token}, false), "logprob": finite(t.Logprob)})
		}
		out = append(out, map[string]any{"token": lp.token, "logprob": lp.logprob, "top_logprobs": top})
	}
	return out
}

// closeItem completes the open text item.
func (rw *responsesWriter) closeItem() {
	if rw.open == "" {
		return
	}
	idx := len(rw.items) - 1
	item := rw.items[idx]
	text := rw.text.String()
	item["status"] = "completed"
	switch rw.open {
	case "message":
		part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": rw.lps}
		item["content"] = []any{part}
		if rw.o.j.stream {
			rw.send("response.output_text.done", map[string]any{"item_id": item["id"], "output_index": idx, "content_index": 0, "text": text, "logprobs": rw.lps})
			rw.send("response.content_part.done", map[string]any{"item_id": item["id"], "output_index": idx, "content_index": 0, "part": part})
		}
	case "reasoning":
		item["content"] = []any{map[string]any{"type": "reasoning_text", "text": text}}
		if rw.o.j.stream {
			rw.send("response.reasoning_text.done", map[string]any{"item_id": item["id"], "output_index": idx, "content_index": 0, "text": text})
		}
	}
	if rw.o.j.stream {
		rw.send("response.output_item.done", map[string]any{"output_index": idx, "item": item})
	}
	rw.open = ""
}

func (rw *responsesWriter) end(e ending) {
	rw.closeItem()
	status := "completed"
	if e.reason == "length" {
		status = "incomplete"
	}
	obj := rw.object(status, &e)
	if rw.st.store {
		rw.o.s.responses.put(rw.o.id, append(rw.st.conversation, rw.reply()), obj)
	}
	if rw.o.j.stream {
		kind := "response.completed"
		if status == "incomplete" {
			kind = "response.incomplete"
		}
		rw.send(kind, map[string]any{"response": obj})
		return
	}
	writeJSON(rw.o.w, http.StatusOK, obj)
}

// reply is the output as an assistant message, for a later turn's prompt.
func (rw *responsesWriter) reply() archgen.Message {
	m := archgen.Message{Role: "assistant", Fields: map[string]any{}}
	var calls []any
	for _, it := range rw.items {
		switch it["type"] {
		case "message":
			m.Content += it["content"].([]any)[0].(map[string]any)["text"].(string)
		case "reasoning":
			m.Fields["reasoning_content"] = it["content"].([]any)[0].(map[string]any)["text"]
		case "function_call":
			var args any = map[string]any{}
			_ = json.Unmarshal([]byte(it["arguments"].(string)), &args)
			calls = append(calls, map[string]any{"id": it["call_id"], "type": "function",
				"function": map[string]any{"name": it["name"], "arguments": args}})
		}
	}
	if calls != nil {
		m.Fields["tool_calls"] = calls
	}
	return m
}

func (rw *responsesWriter) streamError(e *apiError) {
	var param any
	if e.Param != "" {
		param = e.Param
	}
	rw.send("error", map[string]any{"code": e.Code, "message": e.Message, "param": param})
	obj := rw.object("failed", nil)
	obj["error"] = map[string]any{"code": e.Code, "message": e.Message}
	rw.send("response.failed", map[string]any{"response": obj})
}
