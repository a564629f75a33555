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
		if s.eng == nil {
			writeError(w, s.notGenerative())
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

// delta is what a stretch of a reply adds: content, reasoning, and whole
// tool calls.
type delta struct {
	content, reasoning string
	calls              []toolCall
}

func (d delta) empty() bool { return d.content == "" && d.reasoning == "" && len(d.calls) == 0 }

// toolCall is one call a reply makes; arguments is a JSON object's text.
type toolCall struct{ id, name, arguments string }

// splitter divides a chat reply's text into content, reasoning and tool
// calls as its model writes them.
type splitter interface {
	push(text string) delta
	finish() delta
}

// ending is how a generation ended, for its last event or whole response.
type ending struct {
	reason                     string // stop, length or tool_calls
	stopSeq                    string // the stop string that ended it, if one did
	prompt, completion, cached int
	drafted, accepted          int // the draft model's tokens, and those kept
}

// writer puts a generation's output in its API's shape, streamed or whole.
type writer interface {
	// add takes what became ready, and the logprobs of the tokens that
	// made it (when asked for).
	add(d delta, lps []tokenLogprob)
	// end writes a stream's last events, or the whole response.
	end(e ending)
	// streamError reports an error in a stream that has begun.
	streamError(e *apiError)
}

// output is a response's transport: server-sent events or one body.
type output struct {
	s       *Server
	j       *job
	w       http.ResponseWriter
	rc      *http.ResponseController
	flusher http.Flusher
	id      string
	created int64
	failed  error // a write to the client failed
}

func (s *Server) run(w http.ResponseWriter, r *http.Request, j *job) {
	if j.grammar != nil {
		defer j.grammar.Free()
	}
	if s.stopping.Load() {
		writeError(w, errShuttingDown)
		return
	}
	if j.grammar != nil {
		m, err := j.grammar.NewMatcher()
		if err != nil {
			writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "constraint_failed", Message: err.Error()})
			return
		}
		j.req.Constraint = m // the engine frees it, whatever becomes of the request
	}
	s.running.Add(1)
	defer s.running.Add(-1)
	ctx, cancel := s.requestContext(r)
	defer cancel()
	submitted := time.Now()
	arrived := submitted
	events, err := s.eng.Submit(ctx, j.req)
	if err != nil {
		var ob *batch.OverBudgetError
		switch {
		case errors.Is(err, batch.ErrClosed):
			writeError(w, errShuttingDown)
		case errors.Is(err, batch.ErrQueueFull):
			w.Header().Set("Retry-After", "1")
			writeError(w, &apiError{Status: http.StatusTooManyRequests, Type: "server_error", Code: "server_busy",
				Message: fmt.Sprintf("the server is busy: its queue of %d is full; retry later", s.opts.MaxQueue)})
		case errors.As(err, &ob):
			field := j.maxField
			if field == "" {
				field = j.api.maxTokensField()
			}
			if ob.MaxTokensFit < 1 {
				writeError(w, over(j.promptField, "%s: %d tokens need %d bytes of KV cache with the room to answer, more than this server's budget of %d bytes",
					j.promptField, ob.Prompt, ob.Need, ob.Budget))
				return
			}
			writeError(w, over(field, "%s: %d tokens after a prompt of %d need %d bytes of KV cache, more than this server's budget of %d bytes; ask for at most %d",
				field, ob.MaxTokens, ob.Prompt, ob.Need, ob.Budget, ob.MaxTokensFit))
		default:
			writeError(w, badRequest("", "invalid_request", "%v", err))
		}
		return
	}
	o := &output{s: s, j: j, w: w, rc: http.NewResponseController(w),
		id: fmt.Sprintf("%s%d-%d", j.api.idPrefix(), s.created, s.nextID.Add(1)), created: time.Now().Unix()}
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
	out := j.api.writer(o)

	// A reply parser reads the markers, most of them special tokens, so
	// their text is kept where one splits the reply.
	detok := s.m.Tokenizer.NewStream(j.split == nil)
	stops := generate.NewStopText(j.stops)
	split := j.split
	madeCalls := false
	pass := func(text string, lps []tokenLogprob) {
		d := delta{content: text}
		if split != nil {
			d = split.push(text)
		}
		madeCalls = madeCalls || len(d.calls) > 0
		out.add(d, lps)
	}
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
		var lps []tokenLogprob
		if j.req.Logprobs {
			lps = []tokenLogprob{{id: ev.Token, token: s.m.Tokenizer.Decode([]int32{ev.Token}, false), logprob: finite(ev.Logprob), top: ev.TopLogprobs}}
		}
		pass(ready, lps)
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
	end := ending{reason: "stop", completion: last.Tokens}
	entry.cached = last.CachedTokens
	switch {
	case stoppedAt >= 0:
		end.completion, end.stopSeq = stoppedAt, stops.Found()
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		entry.finish, entry.completion, entry.code = "timeout", tokens, "request_timeout"
		s.met.generated(last.PromptTokens, tokens)
		e := &apiError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "request_timeout",
			Message: fmt.Sprintf("the request ran past the server's limit of %v (%d tokens generated)", s.opts.RequestTimeout, tokens)}
		if j.stream {
			out.streamError(e)
			return
		}
		o.deadline()
		writeError(w, e)
		return
	case last.Err != nil:
		s.logf("request %s: %v", o.id, last.Err)
		e := &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "generation_failed", Message: last.Err.Error()}
		if j.stream {
			out.streamError(e)
			return
		}
		writeError(w, e)
		return
	default:
		ready, hit := stops.Push(detok.Flush())
		pass(ready+stops.Rest(), nil)
		if hit {
			end.stopSeq = stops.Found()
		} else if last.Finish == generate.FinishLength {
			end.reason = "length"
		}
	}
	if split != nil {
		d := split.finish()
		madeCalls = madeCalls || len(d.calls) > 0
		if !d.empty() {
			out.add(d, nil)
		}
	}
	if madeCalls && end.reason == "stop" {
		end.reason = "tool_calls"
	}
	s.met.generated(last.PromptTokens, end.completion)
	entry.completion, entry.finish = end.completion, end.reason
	end.prompt, end.cached = last.PromptTokens, last.CachedTokens
	end.drafted, end.accepted = last.Drafted, last.Accepted
	if !j.stream {
		o.deadline()
	}
	out.end(end)
}

// errShuttingDown is the answer to a generation that arrives once the
// server is stopping.
var errShuttingDown = &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
	Message: "the server is shutting down"}

// requestContext is r's context bounded by Options.RequestTimeout.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	if d := s.opts.RequestTimeout; d > 0 {
		return context.WithTimeout(r.Context(), d)
	}
	return context.WithCancel(r.Context())
}

// deadline gives the client WriteTimeout to take what is written next.
func (o *output) deadline() {
	_ = o.rc.SetWriteDeadline(time.Now().Add(o.s.opts.WriteTimeout))
}

// event writes one server-sent event: its data, and its name where the
// API names events.
func (o *output) event(name string, v any) {
	if o.failed != nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		o.failed = err
		return
	}
	o.deadline()
	if name != "" {
		if _, err := fmt.Fprintf(o.w, "event: %s\n", name); err != nil {
			o.failed = err
			return
		}
	}
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
