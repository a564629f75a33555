package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generate/batch"
)

// endpoint decodes a request of type T, checks it with parse and runs it.
func endpoint[T any](s *Server, parse func(*T) (*job, *apiError)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req T
		if e := s.decode(w, r, &req); e != nil {
			writeError(w, e)
			return
		}
		j, e := parse(&req)
		if e != nil {
			writeError(w, e)
			return
		}
		s.run(w, r, j)
	}
}

// tokenLogprob is one token's entry in a response's logprobs.
type tokenLogprob struct {
	id      int32
	token   string
	logprob float64
	top     []batch.TokenLogprob
}

// finite keeps a log-probability JSON can carry (-inf becomes a very
// unlikely value).
func finite(v float32) float64 {
	if math.IsInf(float64(v), -1) || math.IsNaN(float64(v)) {
		return -9999
	}
	return float64(v)
}

// output gathers what a request produced, and streams it when asked.
type output struct {
	s        *Server
	j        *job
	w        http.ResponseWriter
	rc       *http.ResponseController
	flusher  http.Flusher
	id       string
	created  int64
	text     []byte
	logprobs []tokenLogprob
	sentRole bool
	failed   error // a write to the client failed
}

func (s *Server) run(w http.ResponseWriter, r *http.Request, j *job) {
	if s.stopping.Load() {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down", Message: "the server is shutting down"})
		return
	}
	s.running.Add(1)
	defer s.running.Add(-1)
	var ctx context.Context
	var cancel context.CancelFunc
	if d := s.opts.RequestTimeout; d > 0 {
		ctx, cancel = context.WithTimeout(r.Context(), d)
	} else {
		ctx, cancel = context.WithCancel(r.Context())
	}
	defer cancel()
	submitted := time.Now()
	arrived := submitted
	events, err := s.eng.Submit(ctx, j.req)
	if err != nil {
		var ob *batch.OverBudgetError
		switch {
		case errors.Is(err, batch.ErrClosed):
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down", Message: "the server is shutting down"})
		case errors.Is(err, batch.ErrQueueFull):
			w.Header().Set("Retry-After", "1")
			writeError(w, &apiError{Status: http.StatusTooManyRequests, Type: "server_error", Code: "server_busy",
				Message: fmt.Sprintf("the server is busy: its queue of %d is full; retry later", s.opts.MaxQueue)})
		case errors.As(err, &ob):
			field := j.maxField
			if field == "" {
				field = "max_tokens"
			}
			if ob.MaxTokensFit < 1 {
				writeError(w, over(j.promptField(), "%s: %d tokens need %d bytes of KV cache with the room to answer, more than this server's budget of %d bytes",
					j.promptField(), ob.Prompt, ob.Need, ob.Budget))
				return
			}
			writeError(w, over(field, "%s: %d tokens after a prompt of %d need %d bytes of KV cache, more than this server's budget of %d bytes; ask for at most %d",
				field, ob.MaxTokens, ob.Prompt, ob.Need, ob.Budget, ob.MaxTokensFit))
		default:
			writeError(w, badRequest("", "invalid_request", "%v", err))
		}
		return
	}
	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	o := &output{s: s, j: j, w: w, rc: http.NewResponseController(w), id: fmt.Sprintf("%s%d-%d", prefix, s.created, s.nextID.Add(1)), created: time.Now().Unix()}
	w.Header().Set("X-Request-Id", o.id)
	entry := entryOf(w)
	if entry == nil {
		entry = &accessEntry{}
	}
	entry.id, entry.prompt = o.id, len(j.req.Prompt)
	if s.opts.LogPrompts {
		entry.promptText = j.text
	}
	defer func() { _ = o.rc.SetWriteDeadline(time.Time{}) }()
	if j.stream {
		o.flusher, _ = w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Connection", "keep-alive")
		o.deadline()
		w.WriteHeader(http.StatusOK)
		if o.flusher != nil {
			o.flusher.Flush()
		}
	}

	detok := s.m.Tokenizer.NewStream(true)
	stops := generate.NewStopText(j.stops)
	tokens := 0     // tokens received
	stoppedAt := -1 // tokens received when a stop string was found
	var last batch.Event
	for ev := range events { // read to the end, so the engine never waits on us
		if ev.Done {
			last = ev
			continue
		}
		if stoppedAt >= 0 || o.failed != nil {
			continue
		}
		now := time.Now()
		if tokens == 0 {
			entry.ttft = now.Sub(arrived)
		}
		s.met.latency(tokens == 0, now.Sub(submitted))
		submitted = now
		tokens++
		ready, hit := stops.Push(detok.Step(ev.Token))
		var lp *tokenLogprob
		if j.req.Logprobs {
			lp = &tokenLogprob{id: ev.Token, token: s.m.Tokenizer.Decode([]int32{ev.Token}, false), logprob: finite(ev.Logprob), top: ev.TopLogprobs}
		}
		o.add(ready, lp)
		if hit {
			stoppedAt = tokens
			cancel()
		}
		if o.failed != nil {
			cancel()
		}
	}
	if r.Context().Err() != nil || o.failed != nil {
		entry.finish, entry.completion = "client_gone", tokens
		if o.failed != nil {
			// a client that stops reading meets the write deadline here
			s.logf("request %s: dropped: the client did not take its data: %v", o.id, o.failed)
			entry.finish = "write_failed"
		}
		return // the client is gone
	}
	finish := "stop"
	completion := last.Tokens
	entry.cached = last.CachedTokens
	switch {
	case stoppedAt >= 0:
		completion = stoppedAt
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		entry.finish, entry.completion, entry.code = "timeout", tokens, "request_timeout"
		s.met.generated(last.PromptTokens, tokens)
		e := &apiError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "request_timeout",
			Message: fmt.Sprintf("the request ran past the server's limit of %v (%d tokens generated)", s.opts.RequestTimeout, tokens)}
		if j.stream {
			o.event(map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "param": nil, "code": e.Code}})
			o.done()
			return
		}
		o.deadline()
		writeError(w, e)
		return
	case last.Err != nil:
		s.logf("request %s: %v", o.id, last.Err)
		if j.stream {
			o.event(map[string]any{"error": map[string]any{"message": last.Err.Error(), "type": "server_error", "param": nil, "code": "generation_failed"}})
			o.done()
			return
		}
		writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "generation_failed", Message: last.Err.Error()})
		return
	default:
		ready, hit := stops.Push(detok.Flush())
		o.add(ready+stops.Rest(), nil)
		if !hit && last.Finish == generate.FinishLength {
			finish = "length"
		}
	}
	s.met.generated(last.PromptTokens, completion)
	entry.completion, entry.finish = completion, finish
	usage := map[string]any{
		"prompt_tokens":         last.PromptTokens,
		"completion_tokens":     completion,
		"total_tokens":          last.PromptTokens + completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": last.CachedTokens},
	}
	if j.stream {
		o.finish(finish, usage)
		return
	}
	o.deadline()
	writeJSON(w, http.StatusOK, o.whole(finish, usage))
}

// deadline gives the client WriteTimeout to take what is written next.
func (o *output) deadline() {
	_ = o.rc.SetWriteDeadline(time.Now().Add(o.s.opts.WriteTimeout))
}

// add takes the text that became ready and the token's logprobs (nil
// when not asked, or for text alone).
func (o *output) add(text string, lp *tokenLogprob) {
	if !o.j.stream {
		o.text = append(o.text, text...)
		if lp != nil {
			o.logprobs = append(o.logprobs, *lp)
		}
		return
	}
	if text == "" && lp == nil && o.sentRole {
		return
	}
	var lps []tokenLogprob
	if lp != nil {
		lps = []tokenLogprob{*lp}
	}
	o.event(o.chunk(text, lps, nil, nil))
}

// chunk is one streamed object.
func (o *output) chunk(text string, lps []tokenLogprob, finish any, usage any) map[string]any {
	var choice map[string]any
	if o.j.chat {
		delta := map[string]any{}
		if !o.sentRole {
			delta["role"] = "assistant"
			o.sentRole = true
		}
		if text != "" || finish == nil {
			delta["content"] = text
		}
		choice = map[string]any{"index": 0, "delta": delta, "logprobs": o.chatLogprobs(lps), "finish_reason": finish}
	} else {
		o.sentRole = true
		choice = map[string]any{"index": 0, "text": text, "logprobs": o.completionLogprobs(lps, 0), "finish_reason": finish}
	}
	c := o.header()
	c["choices"] = []any{choice}
	if usage != nil {
		c["usage"] = usage
	}
	return c
}

func (o *output) header() map[string]any {
	object := "text_completion"
	if o.j.chat {
		object = "chat.completion.chunk"
		if !o.j.stream {
			object = "chat.completion"
		}
	}
	return map[string]any{"id": o.id, "object": object, "created": o.created, "model": o.s.opts.ModelID}
}

// finish sends the last chunk (with the finish reason and usage), the
// usage chunk stream_options asks for, and [DONE].
func (o *output) finish(reason string, usage map[string]any) {
	o.event(o.chunk("", nil, reason, usage))
	if o.j.includeUsage {
		c := o.header()
		c["choices"] = []any{}
		c["usage"] = usage
		o.event(c)
	}
	o.done()
}

// whole is a response that is not streamed.
func (o *output) whole(reason string, usage map[string]any) map[string]any {
	c := o.header()
	var choice map[string]any
	if o.j.chat {
		choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": string(o.text)},
			"logprobs": o.chatLogprobs(o.logprobs), "finish_reason": reason}
	} else {
		choice = map[string]any{"index": 0, "text": string(o.text), "logprobs": o.completionLogprobs(o.logprobs, 0), "finish_reason": reason}
	}
	c["choices"] = []any{choice}
	c["usage"] = usage
	return c
}

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

// event writes one server-sent event.
func (o *output) event(v any) {
	if o.failed != nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		o.failed = err
		return
	}
	o.deadline()
	if _, err := fmt.Fprintf(o.w, "data: %s\n\n", data); err != nil {
		o.failed = err
		return
	}
	if o.flusher != nil {
		// a flush that cannot write shows in the next write, or here
		if err := o.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			o.failed = err
		}
	}
}

func (o *output) done() {
	if o.failed == nil {
		fmt.Fprint(o.w, "data: [DONE]\n\n")
		if o.flusher != nil {
			o.flusher.Flush()
		}
	}
}
