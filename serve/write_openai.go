package serve

import (
	"strings"
)

// api is the API a request came in by: it decides the response's shape.
type api int

const (
	apiCompletions api = iota // POST /v1/completions
	apiChat                   // POST /v1/chat/completions
	apiMessages               // POST /v1/messages
	apiResponses              // POST /v1/responses
)

func (a api) idPrefix() string {
	switch a {
	case apiChat:
		return "chatcmpl-"
	case apiMessages:
		return "msg_"
	case apiResponses:
		return "resp_"
	}
	return "cmpl-"
}

// maxTokensField is the field that bounds a reply's tokens in the API.
func (a api) maxTokensField() string {
	if a == apiResponses {
		return "max_output_tokens"
	}
	return "max_tokens"
}

func (a api) writer(o *output) writer {
	switch a {
	case apiChat:
		return &chatWriter{o: o}
	case apiMessages:
		return newMessagesWriter(o)
	case apiResponses:
		return newResponsesWriter(o)
	}
	return &completionWriter{o: o}
}

// header is the fields every OpenAI response object starts with.
func (o *output) header(object string) map[string]any {
	return map[string]any{"id": o.id, "object": object, "created": o.created, "model": o.j.model}
}

// usage is the OpenAI usage object.
func (e ending) usage() map[string]any {
	u := map[string]any{
		"prompt_tokens":         e.prompt,
		"completion_tokens":     e.completion,
		"total_tokens":          e.prompt + e.completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": e.cached},
	}
	if e.drafted > 0 {
		// the draft model's tokens, as OpenAI counts a prediction's
		u["completion_tokens_details"] = map[string]any{
			"accepted_prediction_tokens": e.accepted, "rejected_prediction_tokens": e.drafted - e.accepted}
	}
	return u
}

// openaiStreamError ends an OpenAI stream with an error event and [DONE].
func (o *output) openaiStreamError(e *apiError) {
	o.event("", map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "param": nil, "code": e.Code}})
	o.done()
}

// openaiEnd sends a stream's last chunk, the usage chunk stream_options
// asks for, and [DONE].
func (o *output) openaiEnd(object string, last map[string]any, e ending) {
	last["usage"] = e.usage()
	o.event("", last)
	if o.j.includeUsage {
		c := o.header(object)
		c["choices"] = []any{}
		c["usage"] = e.usage()
		o.event("", c)
	}
	o.done()
}

// chatWriter writes chat completions: chat.completion.chunk events, or one
// chat.completion; reasoning as reasoning_content, calls as tool_calls.
type chatWriter struct {
	o         *output
	text      strings.Builder
	reasoning strings.Builder
	calls     []toolCall
	logprobs  []tokenLogprob
	sentRole  bool
}

func (c *chatWriter) add(d delta, lps []tokenLogprob) {
	if !c.o.j.stream {
		c.text.WriteString(d.content)
		c.reasoning.WriteString(d.reasoning)
		c.calls = append(c.calls, d.calls...)
		c.logprobs = append(c.logprobs, lps...)
		return
	}
	if d.empty() && lps == nil && c.sentRole {
		return
	}
	c.o.event("", c.chunk(d, lps, nil))
}

// chunk is one streamed object; the first carries the role.
func (c *chatWriter) chunk(d delta, lps []tokenLogprob, finish any) map[string]any {
	dm := map[string]any{}
	if !c.sentRole {
		dm["role"] = "assistant"
		c.sentRole = true
	}
	if d.content != "" || (finish == nil && d.reasoning == "" && len(d.calls) == 0) {
		dm["content"] = d.content
	}
	if d.reasoning != "" {
		dm["reasoning_content"] = d.reasoning
	}
	if len(d.calls) > 0 {
		calls := make([]any, len(d.calls))
		for i, tc := range d.calls {
			calls[i] = openaiCall(tc, len(c.calls)+i)
		}
		c.calls = append(c.calls, d.calls...)
		dm["tool_calls"] = calls
	}
	ch := c.o.header("chat.completion.chunk")
	ch["choices"] = []any{map[string]any{"index": 0, "delta": dm, "logprobs": c.o.chatLogprobs(lps), "finish_reason": finish}}
	return ch
}

// openaiCall is a tool call in the chat API's shape.
func openaiCall(tc toolCall, index int) map[string]any {
	return map[string]any{"index": index, "id": tc.id, "type": "function",
		"function": map[string]any{"name": tc.name, "arguments": tc.arguments}}
}

func (c *chatWriter) end(e ending) {
	if c.o.j.stream {
		c.o.openaiEnd("chat.completion.chunk", c.chunk(delta{}, nil, e.reason), e)
		return
	}
	msg := map[string]any{"role": "assistant", "content": c.text.String()}
	if c.reasoning.Len() > 0 {
		msg["reasoning_content"] = c.reasoning.String()
	}
	if len(c.calls) > 0 {
		calls := make([]any, len(c.calls))
		for i, tc := range c.calls {
			call := openaiCall(tc, i)
			delete(call, "index")
			calls[i] = call
		}
		msg["tool_calls"] = calls
		if c.text.Len() == 0 {
			msg["content"] = nil
		}
	}
	r := c.o.header("chat.completion")
	r["choices"] = []any{map[string]any{"index": 0, "message": msg, "logprobs": c.o.chatLogprobs(c.logprobs), "finish_reason": e.reason}}
	r["usage"] = e.usage()
	writeJSON(c.o.w, 200, r)
}

func (c *chatWriter) streamError(e *apiError) { c.o.openaiStreamError(e) }

// completionWriter writes text completions: text_completion events, or one
// text_completion.
type completionWriter struct {
	o        *output
	text     strings.Builder
	logprobs []tokenLogprob
	sent     bool // a chunk went out
}

func (c *completionWriter) add(d delta, lps []tokenLogprob) {
	if !c.o.j.stream {
		c.text.WriteString(d.content)
		c.logprobs = append(c.logprobs, lps...)
		return
	}
	if d.content == "" && lps == nil && c.sent {
		return
	}
	c.sent = true
	c.o.event("", c.chunk(d.content, lps, nil))
}

func (c *completionWriter) chunk(text string, lps []tokenLogprob, finish any) map[string]any {
	ch := c.o.header("text_completion")
	ch["choices"] = []any{map[string]any{"index": 0, "text": text, "logprobs": c.o.completionLogprobs(lps, 0), "finish_reason": finish}}
	return ch
}

func (c *completionWriter) end(e ending) {
	if c.o.j.stream {
		c.o.openaiEnd("text_completion", c.chunk("", nil, e.reason), e)
		return
	}
	r := c.o.header("text_completion")
	r["choices"] = []any{map[string]any{"index": 0, "text": c.text.String(), "logprobs": c.o.completionLogprobs(c.logprobs, 0), "finish_reason": e.reason}}
	r["usage"] = e.usage()
	writeJSON(c.o.w, 200, r)
}

func (c *completionWriter) streamError(e *apiError) { c.o.openaiStreamError(e) }

// entry is one token's logprobs entry: its text, and its bytes as the
// token holds them (part of a character where the token is, which the text
// shows as U+FFFD).
func (o *output) entry(id int32, t string, lp float64) map[string]any {
	b := o.s.m.Tokenizer.TokenBytes(id)
	ints := make([]int, len(b))
	for i, c := range b {
		ints[i] = int(c)
	}
	return map[string]any{"token": t, "logprob": lp, "bytes": ints}
}

// chatLogprobs is the chat form: {"content": [{token, logprob, bytes,
// top_logprobs}]}, or nil when not asked.
func (o *output) chatLogprobs(lps []tokenLogprob) any {
	if !o.j.req.Logprobs {
		return nil
	}
	content := make([]any, 0, len(lps))
	for _, lp := range lps {
		e := o.entry(lp.id, lp.token, lp.logprob)
		top := make([]any, 0, len(lp.top))
		for _, t := range lp.top {
			top = append(top, o.entry(t.Token, o.s.m.Tokenizer.Decode([]int32{t.Token}, false), finite(t.Logprob)))
		}
		e["top_logprobs"] = top
		content = append(content, e)
	}
	return map[string]any{"content": content}
}

// completionLogprobs is the legacy form: tokens, token_logprobs,
// top_logprobs (token to logprob) and text_offset.
func (o *output) completionLogprobs(lps []tokenLogprob, offset int) any {
	if !o.j.req.Logprobs {
		return nil
	}
	tokens, values, tops, offsets := []string{}, []float64{}, []map[string]float64{}, []int{}
	for _, lp := range lps {
		tokens = append(tokens, lp.token)
		values = append(values, lp.logprob)
		top := map[string]float64{}
		for _, t := range lp.top {
			top[o.s.m.Tokenizer.Decode([]int32{t.Token}, false)] = finite(t.Logprob)
		}
		tops = append(tops, top)
		offsets = append(offsets, offset)
		offset += len(lp.token)
	}
	return map[string]any{"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}
}
