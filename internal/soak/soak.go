// Package soak drives an OpenAI-compatible server with a bounded mixed
// load, as clients in the wild do: whole and streamed chats and
// completions, clients that cancel mid-stream or read slowly, and
// malformed requests; with Config.Agents also the Responses and Messages
// APIs, forced tool calls and JSON-schema replies (and with
// Config.Embeddings, embeddings). It reports every request's outcome, latencies,
// throughput and the server process's memory, file descriptors (and
// goroutines, where its /metrics has them) before and after, and checks
// that nothing was lost, nothing failed on the server's side, nothing
// leaked and memory stayed within a bound. `archrun serve`'s soak test and
// `make bench`'s soak against llama-server both run it.
package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is one soak run.
type Config struct {
	// Root is the server's address (http://127.0.0.1:8080), Model the
	// model id requests name, APIKey their bearer token ("" for none).
	Root, Model, APIKey string
	// Clients run at once for Duration, each sending a request after the
	// last (defaults 8 and 1 minute).
	Clients  int
	Duration time.Duration
	// Seed draws each client's mix of requests.
	Seed uint64
	// PID is the server's process, for its memory and descriptors (0:
	// not measured).
	PID int
	// MaxGrowth bounds the server's resident memory above what it held
	// before the load (0: not checked).
	MaxGrowth int64
	// Settle is how long after the load the server has to free what the
	// requests held before the counts after are taken (default 2s).
	Settle time.Duration
	// PromptWords > 0 makes every request a whole chat whose prompt is a
	// text of about that many words (a long-prompt load: admission by
	// memory), each asking for MaxTokens (default 32).
	PromptWords, MaxTokens int
	// Requests > 0 has each client send that many requests and stop
	// (Duration then only bounds the run).
	Requests int
	// Agents adds to the mix what agent programs send: the Responses and
	// Messages APIs (whole and streamed), chats with a forced tool call and
	// chats whose reply a JSON schema constrains (each must parse).
	Agents bool
	// Embeddings adds /v1/embeddings requests (one to four inputs) to the
	// agents' mix.
	Embeddings bool
}

// Kinds of request in the mix.
const (
	ChatWhole        = "chat"
	ChatStream       = "chat_stream"
	CompletionWhole  = "completion"
	CompletionStream = "completion_stream"
	Cancel           = "cancel_mid_stream"
	SlowReader       = "slow_reader"
	Malformed        = "malformed"
	ResponsesWhole   = "responses"
	ResponsesStream  = "responses_stream"
	MessagesWhole    = "messages"
	MessagesStream   = "messages_stream"
	ToolCall         = "tool_call"
	JSONSchema       = "json_schema"
	Embeddings       = "embeddings"
)

// agentTool is the tool of the forced tool calls.
var agentTool = map[string]any{"type": "function", "function": map[string]any{"name": "lookup",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{
		"topic": map[string]any{"type": "string", "maxLength": 16}}, "required": []string{"topic"}, "additionalProperties": false}}}

// agentSchema is the JSON schema of the constrained replies.
var agentSchema = map[string]any{"type": "object", "properties": map[string]any{
	"answer": map[string]any{"type": "string", "maxLength": 24}, "sure": map[string]any{"type": "boolean"}},
	"required": []string{"answer", "sure"}, "additionalProperties": false}

// Outcomes of a request.
const (
	OK          = "ok"           // answered whole (a stream ending in [DONE])
	Cancelled   = "cancelled"    // the client left mid-stream, as planned
	Rejected    = "rejected"     // a malformed request refused with a 4xx
	Busy        = "busy"         // 429: the server's queue was full
	Unexpected  = "unexpected"   // a well-formed request refused, or a malformed one taken
	ServerError = "server_error" // 5xx
	Lost        = "lost"         // no answer, or a stream cut short
)

// Result is one request.
type Result struct {
	Kind, Outcome string
	Status        int
	TTFT          time.Duration   // to the first token's event (streams)
	ITL           []time.Duration // between a stream's token events
	Tokens        int             // completion tokens, from usage
	Err           string
}

// Report is a run's outcome.
type Report struct {
	Config                            Config `json:"-"`
	Duration                          time.Duration
	Requests                          int
	ByOutcome                         map[string]int
	ByKind                            map[string]map[string]int
	TTFTp50                           time.Duration
	TTFTp99                           time.Duration
	ITLp50                            time.Duration
	ITLp99                            time.Duration
	Tokens                            int
	TokensPerS                        float64
	RSSBefore                         int64
	RSSPeak                           int64
	FDsBefore                         int
	FDsAfter                          int
	GoroutinesBefore, GoroutinesAfter int      // -1: not reported
	Failures                          []string // what Check found
	Examples                          []string // the first requests of each bad outcome
}

var prompts = []string{
	"What is the capital of France?", "Name three colors.", "Write a haiku about the sea.",
	"Explain rain to a child.", "List four animals that live in the ocean.", "Count from one to twenty.",
	"Tell me a short story about a robot.", "What do bees make?",
}

var malformed = []struct{ path, body string }{
	{"/v1/chat/completions", `{"messages": [`},
	{"/v1/chat/completions", `{"messages": []}`},
	{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"}`},
	{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "temperature": -1}`},
	{"/v1/completions", `[1, 2, 3]`},
	{"/v1/completions", `{"prompt": "hi", "top_p": 5}`},
	{"/v1/chat/completions", `{"messages": "hello"}`},
}

// malformedAgents are malformed requests to the agents' endpoints and fields.
var malformedAgents = []struct{ path, body string }{
	{"/v1/responses", `{"input": []}`},
	{"/v1/responses", `{"input": "hi", "previous_response_id": "resp_none"}`},
	{"/v1/messages", `{"messages": [{"role": "system", "content": "x"}], "max_tokens": 4}`},
	{"/v1/messages", `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stop_sequences": "x"}`},
	{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wat"}}}}`},
	{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}`},
}

// Run drives the server for cfg.Duration and checks the outcome.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Clients <= 0 {
		cfg.Clients = 8
	}
	if cfg.Duration <= 0 {
		cfg.Duration = time.Minute
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 2 * time.Second
	}
	rep := &Report{Config: cfg, ByOutcome: map[string]int{}, ByKind: map[string]map[string]int{}}
	rep.RSSBefore, _ = rss(cfg.PID)
	rep.FDsBefore = fds(cfg.PID)
	rep.GoroutinesBefore = goroutines(cfg.Root, cfg.APIKey)

	var peak int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if r, err := rss(cfg.PID); err == nil {
				peak = max(peak, r)
			}
			select {
			case <-t.C:
			case <-stopSampling:
				return
			}
		}
	}()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients}}
	loadCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	var results []Result
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(c)))
			for n := 0; loadCtx.Err() == nil && (cfg.Requests <= 0 || n < cfg.Requests); n++ {
				r := one(loadCtx, client, cfg, rng)
				if r.Outcome == "" {
					continue // the load's time ran out mid-request
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	rep.Duration = time.Since(start)
	client.CloseIdleConnections()
	time.Sleep(cfg.Settle)
	close(stopSampling)
	<-sampled
	rep.RSSPeak = peak
	rep.FDsAfter = fds(cfg.PID)
	rep.GoroutinesAfter = goroutines(cfg.Root, cfg.APIKey)

	var ttft, itl []time.Duration
	for _, r := range results {
		rep.Requests++
		rep.ByOutcome[r.Outcome]++
		if rep.ByKind[r.Kind] == nil {
			rep.ByKind[r.Kind] = map[string]int{}
		}
		rep.ByKind[r.Kind][r.Outcome]++
		if r.TTFT > 0 {
			ttft = append(ttft, r.TTFT)
		}
		itl = append(itl, r.ITL...)
		rep.Tokens += r.Tokens
		switch r.Outcome {
		case Unexpected, ServerError, Lost:
			if len(rep.Examples) < 10 {
				rep.Examples = append(rep.Examples, fmt.Sprintf("%s: %s (%d): %s", r.Kind, r.Outcome, r.Status, r.Err))
			}
		}
	}
	rep.TTFTp50, rep.TTFTp99 = quantile(ttft, 0.5), quantile(ttft, 0.99)
	rep.ITLp50, rep.ITLp99 = quantile(itl, 0.5), quantile(itl, 0.99)
	rep.TokensPerS = float64(rep.Tokens) / rep.Duration.Seconds()
	rep.check()
	return rep, nil
}

// check fills Failures.
func (r *Report) check() {
	for _, o := range []string{Unexpected, ServerError, Lost} {
		if n := r.ByOutcome[o]; n > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%d requests %s", n, o))
		}
	}
	if r.ByOutcome[OK] == 0 {
		r.Failures = append(r.Failures, "no request was answered")
	}
	if r.Config.PID > 0 {
		if r.FDsAfter > r.FDsBefore+4 {
			r.Failures = append(r.Failures, fmt.Sprintf("file descriptors: %d before, %d after", r.FDsBefore, r.FDsAfter))
		}
		if g := r.Config.MaxGrowth; g > 0 && r.RSSPeak-r.RSSBefore > g {
			r.Failures = append(r.Failures, fmt.Sprintf("resident memory grew by %d bytes (from %d to a peak of %d), more than %d",
				r.RSSPeak-r.RSSBefore, r.RSSBefore, r.RSSPeak, g))
		}
	}
	if r.GoroutinesBefore >= 0 && r.GoroutinesAfter > r.GoroutinesBefore+8 {
		r.Failures = append(r.Failures, fmt.Sprintf("goroutines: %d before, %d after", r.GoroutinesBefore, r.GoroutinesAfter))
	}
}

// Summary is the report in a few lines.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests in %v from %d clients: ", r.Requests, r.Duration.Round(time.Second), r.Config.Clients)
	keys := make([]string, 0, len(r.ByOutcome))
	for k := range r.ByOutcome {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, r.ByOutcome[k])
	}
	fmt.Fprintf(&b, "\nTTFT p50 %v p99 %v; inter-token p50 %v p99 %v; %.1f tokens/s (%d tokens)\n",
		r.TTFTp50.Round(time.Millisecond), r.TTFTp99.Round(time.Millisecond), r.ITLp50.Round(100*time.Microsecond),
		r.ITLp99.Round(100*time.Microsecond), r.TokensPerS, r.Tokens)
	fmt.Fprintf(&b, "resident memory %d MiB before, peak %d MiB; descriptors %d -> %d; goroutines %d -> %d\n",
		r.RSSBefore>>20, r.RSSPeak>>20, r.FDsBefore, r.FDsAfter, r.GoroutinesBefore, r.GoroutinesAfter)
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "FAIL: %s\n", f)
	}
	for _, e := range r.Examples {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

// one sends one request of a kind drawn from the mix.
func one(ctx context.Context, client *http.Client, cfg Config, rng *rand.Rand) Result {
	if cfg.PromptWords > 0 {
		return long(ctx, client, cfg, rng)
	}
	p := prompts[rng.IntN(len(prompts))]
	maxTokens := 8 + rng.IntN(40)
	chatBody := func(stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": cfg.Model, "messages": []any{map[string]any{"role": "user", "content": p}},
			"max_tokens": maxTokens, "stream": stream, "stream_options": streamOptions(stream)})
		return string(b)
	}
	complBody := func(stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": cfg.Model, "prompt": p, "max_tokens": maxTokens,
			"stream": stream, "stream_options": streamOptions(stream)})
		return string(b)
	}
	if cfg.Agents && rng.IntN(100) < 40 {
		return agents(ctx, client, cfg, rng, p, maxTokens)
	}
	switch x := rng.IntN(100); {
	case x < 25:
		return whole(ctx, client, cfg, ChatWhole, "/v1/chat/completions", chatBody(false))
	case x < 45:
		return stream(ctx, client, cfg, ChatStream, "/v1/chat/completions", chatBody(true), -1, 0)
	case x < 60:
		return whole(ctx, client, cfg, CompletionWhole, "/v1/completions", complBody(false))
	case x < 72:
		return stream(ctx, client, cfg, CompletionStream, "/v1/completions", complBody(true), -1, 0)
	case x < 82:
		return stream(ctx, client, cfg, Cancel, "/v1/chat/completions", chatBody(true), 1+rng.IntN(3), 0)
	case x < 90:
		return stream(ctx, client, cfg, SlowReader, "/v1/chat/completions", chatBody(true), -1, 30*time.Millisecond)
	default:
		m := malformed[rng.IntN(len(malformed))]
		return whole(ctx, client, cfg, Malformed, m.path, m.body)
	}
}

// agents sends one request of the agents' mix.
func agents(ctx context.Context, client *http.Client, cfg Config, rng *rand.Rand, p string, maxTokens int) Result {
	body := func(v map[string]any) string {
		v["model"] = cfg.Model
		b, _ := json.Marshal(v)
		return string(b)
	}
	user := []any{map[string]any{"role": "user", "content": p}}
	if cfg.Embeddings && rng.IntN(100) < 12 {
		inputs := make([]string, 1+rng.IntN(4))
		for i := range inputs {
			inputs[i] = prompts[rng.IntN(len(prompts))]
		}
		return whole(ctx, client, cfg, Embeddings, "/v1/embeddings", body(map[string]any{"input": inputs}))
	}
	switch x := rng.IntN(100); {
	case x < 20:
		return whole(ctx, client, cfg, ResponsesWhole, "/v1/responses", body(map[string]any{"input": p, "max_output_tokens": maxTokens}))
	case x < 35:
		return stream(ctx, client, cfg, ResponsesStream, "/v1/responses", body(map[string]any{"input": p, "max_output_tokens": maxTokens, "stream": true}), -1, 0)
	case x < 50:
		return whole(ctx, client, cfg, MessagesWhole, "/v1/messages", body(map[string]any{"messages": user, "max_tokens": maxTokens}))
	case x < 65:
		return stream(ctx, client, cfg, MessagesStream, "/v1/messages", body(map[string]any{"messages": user, "max_tokens": maxTokens, "stream": true}), -1, 0)
	case x < 78:
		return whole(ctx, client, cfg, ToolCall, "/v1/chat/completions", body(map[string]any{"messages": user, "max_tokens": 96,
			"tools": []any{agentTool}, "tool_choice": "required", "parallel_tool_calls": false}))
	case x < 92:
		return whole(ctx, client, cfg, JSONSchema, "/v1/chat/completions", body(map[string]any{"messages": user, "max_tokens": 96,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a", "schema": agentSchema}}}))
	default:
		m := malformedAgents[rng.IntN(len(malformedAgents))]
		return whole(ctx, client, cfg, Malformed, m.path, m.body)
	}
}

// LongPrompt is the long-prompt load's kind.
const LongPrompt = "long_prompt"

// long is a whole chat about a text of cfg.PromptWords words.
func long(ctx context.Context, client *http.Client, cfg Config, rng *rand.Rand) Result {
	var b strings.Builder
	b.WriteString("Summarize this text in one sentence:\n")
	for i := 0; i < cfg.PromptWords; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
	maxTokens := cfg.MaxTokens
	if maxTokens <= 0 {
		maxTokens = 32
	}
	body, _ := json.Marshal(map[string]any{"model": cfg.Model, "max_tokens": maxTokens,
		"messages": []any{map[string]any{"role": "user", "content": b.String()}}})
	return whole(ctx, client, cfg, LongPrompt, "/v1/chat/completions", string(body))
}

var words = strings.Fields(`the river city morning light market street window garden winter summer
	bridge stone paper letter music evening forest mountain harbor train station coffee bread table
	friend teacher village road field storm quiet bright old new small large early late`)

func streamOptions(stream bool) any {
	if !stream {
		return nil
	}
	return map[string]any{"include_usage": true}
}

func request(ctx context.Context, cfg Config, path, body string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Root+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	return req
}

// classify turns a status into an outcome for a request of kind.
func classify(kind string, status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return Busy
	case status >= 500:
		return ServerError
	case kind == Malformed && status >= 400:
		return Rejected
	case kind == Malformed, status >= 400:
		return Unexpected
	}
	return ""
}

// failed is r lost to err, or no result at all when the load's time ran
// out under it.
func failed(ctx context.Context, r Result, err error) Result {
	if ctx.Err() != nil {
		return Result{}
	}
	r.Outcome, r.Err = Lost, err.Error()
	return r
}

func whole(ctx context.Context, client *http.Client, cfg Config, kind, path, body string) Result {
	r := Result{Kind: kind}
	resp, err := client.Do(request(ctx, cfg, path, body))
	if err != nil {
		return failed(ctx, r, err)
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return failed(ctx, r, err)
	}
	if o := classify(kind, resp.StatusCode); o != "" {
		r.Outcome, r.Err = o, string(bytes.TrimSpace(data))
		return r
	}
	var v struct {
		Type, Object string
		Choices      []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string           `json:"content"`
				ToolCalls []json.RawMessage `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
			OutputTokens     int `json:"output_tokens"`
		} `json:"usage"`
	}
	err = json.Unmarshal(data, &v)
	if kind == Embeddings {
		var e struct {
			Data []struct {
				Embedding []float64 `json:"embedding"`
			} `json:"data"`
		}
		if json.Unmarshal(data, &e) != nil || len(e.Data) == 0 || len(e.Data[0].Embedding) == 0 {
			r.Outcome, r.Err = Lost, "not an embeddings response: "+string(data)
			return r
		}
		r.Outcome = OK
		return r
	}
	switch {
	case err == nil && (kind == ResponsesWhole && v.Object == "response" || kind == MessagesWhole && v.Type == "message"):
		r.Outcome, r.Tokens = OK, v.Usage.OutputTokens
		return r
	case err != nil || len(v.Choices) != 1:
		r.Outcome, r.Err = Lost, "not a whole response: "+string(data)
		return r
	}
	c := v.Choices[0]
	switch {
	case kind == ToolCall && (c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1):
		r.Outcome, r.Err = Unexpected, "a forced tool call did not come: "+string(data)
		return r
	case kind == JSONSchema && c.FinishReason == "stop" && (c.Message.Content == nil || !json.Valid([]byte(*c.Message.Content))):
		r.Outcome, r.Err = Unexpected, "a JSON-schema reply that is not JSON: "+string(data)
		return r
	}
	r.Outcome, r.Tokens = OK, v.Usage.CompletionTokens
	return r
}

// stream reads a streamed response: all of it (leaveAfter < 0), or
// leaveAfter events before closing it; pause between reads.
func stream(ctx context.Context, client *http.Client, cfg Config, kind, path, body string, leaveAfter int, pause time.Duration) Result {
	r := Result{Kind: kind}
	start := time.Now()
	resp, err := client.Do(request(ctx, cfg, path, body))
	if err != nil {
		return failed(ctx, r, err)
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	if o := classify(kind, resp.StatusCode); o != "" {
		data, _ := io.ReadAll(resp.Body)
		r.Outcome, r.Err = o, string(bytes.TrimSpace(data))
		return r
	}
	rd := bufio.NewReader(resp.Body)
	events := 0
	last := start
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if ctx.Err() != nil {
				return Result{}
			}
			r.Outcome, r.Err = Lost, fmt.Sprintf("the stream ended without its last event after %d events: %v", events, err)
			return r
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			r.Outcome = OK
			return r
		}
		// The OpenAI chat and completion chunks, and the typed events of
		// the Messages and Responses APIs.
		var ev struct {
			Type    string `json:"type"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
				OutputTokens     int `json:"output_tokens"`
			} `json:"usage"`
			Response *struct {
				Usage *struct {
					OutputTokens int `json:"output_tokens"`
				} `json:"usage"`
			} `json:"response"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			r.Outcome, r.Err = Lost, "an event that is not JSON: "+data
			return r
		}
		if ev.Error != nil || ev.Type == "error" || ev.Type == "response.failed" {
			r.Outcome, r.Err = ServerError, "an error event: "+data
			return r
		}
		if ev.Usage != nil {
			r.Tokens = max(ev.Usage.CompletionTokens, ev.Usage.OutputTokens)
		}
		switch ev.Type {
		case "message_stop":
			r.Outcome = OK
			return r
		case "response.completed", "response.incomplete":
			if ev.Response != nil && ev.Response.Usage != nil {
				r.Tokens = ev.Response.Usage.OutputTokens
			}
			r.Outcome = OK
			return r
		}
		token := ev.Type == "content_block_delta" || ev.Type == "response.output_text.delta"
		if token || len(ev.Choices) > 0 && (ev.Choices[0].Text != "" || ev.Choices[0].Delta.Content != "") {
			now := time.Now()
			if events == 0 {
				r.TTFT = now.Sub(start)
			} else {
				r.ITL = append(r.ITL, now.Sub(last))
			}
			last = now
			events++
			if leaveAfter >= 0 && events >= leaveAfter {
				r.Outcome = Cancelled
				return r // closing the body leaves the stream
			}
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// rss is a process's resident memory, from /proc.
func rss(pid int) (int64, error) {
	if pid <= 0 {
		return 0, errors.New("no process")
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n << 10, err
			}
		}
	}
	return 0, errors.New("no VmRSS")
}

// fds is the number of a process's open file descriptors (-1 unknown).
func fds(pid int) int {
	if pid <= 0 {
		return -1
	}
	entries, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return -1
	}
	return len(entries)
}

// goroutines reads go_goroutines from the server's /metrics (-1 where it
// has none).
func goroutines(root, key string) int {
	req, _ := http.NewRequest(http.MethodGet, root+"/metrics", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				return int(n)
			}
		}
	}
	return -1
}
