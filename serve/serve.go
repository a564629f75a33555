// Package serve is an HTTP server that speaks the OpenAI API over one loaded
// model: GET /v1/models, GET /health, POST /v1/chat/completions and POST
// /v1/completions, streamed as server-sent events or not; the Responses API
// (POST /v1/responses, GET and DELETE /v1/responses/{id}) and the Anthropic
// Messages API (POST /v1/messages, /v1/messages/count_tokens) on the same
// engine; POST /v1/embeddings, the model's pooled final hidden states;
// POST /v1/rerank (and /rerank), a cross-encoder's relevance of each
// document to a query; GET /metrics gives Prometheus's text format (requests by path and status, prompt and
// generated tokens, the queue, the prompt cache, memory, and histograms of
// the time to first token and between tokens). Requests run on a
// continuous-batching engine (generate/batch): at most MaxBatch of them
// decode at once, the rest queue, and a prompt cache keeps the KV of earlier
// prompts for later ones that start the same way.
//
// A chat request's messages (and tools) go through the model's chat
// template; a completion's prompt is encoded as it is. A reply's tool calls
// and reasoning are parsed out in the format the model's files name
// (package reply): tool_calls with finish_reason "tool_calls",
// reasoning_content. tool_choice required or a named function, and
// response_format (json_object, json_schema), grammar, json_schema and
// vLLM's guided_ fields constrain the reply by a token mask (package
// constrain) applied at each step. The sampling fields
// (temperature, top_p, top_k, min_p, seed, repetition_penalty) mean what
// mlx-lm's sampler makes of them; stop strings end the text before them,
// and logprobs with top_logprobs give each token's log-probability and
// its most likely alternatives. With a draft model (Options.Draft) a
// request running alone is decoded speculatively unless it sets
// "speculative": false, and its usage counts the drafted tokens
// (completion_tokens_details). Every response carries usage and
// finish_reason; a streamed one ends with "data: [DONE]".
//
// A request the server does not take gets an OpenAI-style error body,
// {"error": {"message", "type", "param", "code"}}, naming the field: 400 for
// malformed JSON, a field of the wrong type or out of range, empty messages
// or a prompt longer than the model's context; 404 for an unknown path
// (and, with Options.StrictModel, a model that is neither Options.ModelID
// nor one of Options.Aliases: otherwise any name is served); 422 for what the server does not do (n > 1, several prompts); 401
// (code invalid_api_key) for a request without one of Options.APIKeys as
// its bearer token, where keys are set (GET /health and /metrics stay open);
// 413 for a body past Limits.BodyBytes and 408 for one slower than
// Limits.BodyTimeout; 400 with code limit_exceeded for a field past the
// other Limits (messages, tools, prompt tokens, max_tokens, stop strings);
// 504 (code request_timeout) for a generation past Options.RequestTimeout;
// 400 limit_exceeded naming max_tokens for a request whose KV alone
// exceeds Options.KVBudget, and 429 server_busy (with Retry-After) past
// Options.MaxQueue waiting requests.
// An encoder (BERT and its kin: archgen.ErrEncoder) is served without an
// engine: embeddings and rerank, and generation requests refused with 400
// model_not_supported.
// A panic in a handler becomes a 500 error for that request alone. A client
// that goes away, or stops taking a stream for Options.WriteTimeout, cancels
// its request, which leaves the batch at the next step.
//
// Browsers may call the API from Options.CORSOrigins alone. With
// Options.AccessLog each request writes one structured record (no prompt
// text unless Options.LogPrompts); each generation's response carries its
// id in X-Request-Id.
package serve

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/generate/batch"
)

// Options configure a Server.
type Options struct {
	// ModelID is the name /v1/models lists first and responses carry.
	ModelID string
	// Aliases are more names /v1/models lists for the model; a request
	// naming one gets it back in its response's model field.
	Aliases []string
	// StrictModel refuses (404 model_not_found) a request whose model is
	// neither ModelID nor an alias. Without it any name is served, as
	// clients with a default model name ("gpt-4o-mini") expect of a
	// server of one model.
	StrictModel bool
	// ContextLength bounds a request's prompt and generation, in tokens
	// (0: no bound).
	ContextLength int
	// MaxBatch is how many requests decode at once (default 8).
	MaxBatch int
	// PromptCacheBytes bounds the prompt cache (0: none).
	PromptCacheBytes int64
	// KVBudget bounds the bytes the batch's KV caches may reach (0: no
	// bound): a request waits until the batch with it fits at its longest;
	// one that alone needs more gets a 400 naming max_tokens (or the
	// prompt) with the tokens that would fit.
	KVBudget int64
	// KVReserve is the part of KVBudget the caches may not take (see
	// batch.Options.KVReserve).
	KVReserve int64
	// MaxQueue bounds the requests waiting for room (0: no bound); more
	// get 429 (code server_busy) with Retry-After.
	MaxQueue int
	// DefaultMaxTokens is a request's token budget when it gives none
	// (default 512).
	DefaultMaxTokens int
	// Log receives a line per failed request (nil: none).
	Log *log.Logger
	// APIKeys, when any is given, are the bearer tokens requests must carry
	// (Authorization: Bearer KEY) on every path but GET /health and GET
	// /metrics; others get a 401 in the OpenAI error shape. Keys are
	// compared in constant time.
	APIKeys []string
	// Limits bound a request's body and fields (zero fields:
	// DefaultLimits).
	Limits Limits
	// RequestTimeout bounds a generation's time from its arrival (0: no
	// bound): past it the generation stops and the request gets a 504
	// (code request_timeout), as an error event where it streams.
	RequestTimeout time.Duration
	// WriteTimeout bounds the time a client may take to accept each
	// streamed event or a whole response (default 30s): a client that
	// stops reading is dropped and its row in the batch freed.
	WriteTimeout time.Duration
	// CORSOrigins are the origins browsers may call the API from ("*":
	// any); none, the default, sends no CORS headers and refuses
	// preflight requests.
	CORSOrigins []string
	// AccessLog, when set, receives one structured record a request: its
	// method, path, status, duration and client, and for generations the
	// id, tokens, cached tokens, finish reason and time to first token.
	AccessLog *slog.Logger
	// LogPrompts adds each generation's prompt text to its access record
	// (off by default: prompts stay out of logs).
	LogPrompts bool
	// KeptResponses bounds the Responses API's responses kept in memory
	// for previous_response_id and GET /v1/responses/{id}: the most recent
	// ones (default 1024; negative: none kept).
	KeptResponses int
	// EmbedPooling is how /v1/embeddings pools an input's hidden states:
	// "last" or "mean" (archgen.EmbedOptions.Pooling), normalized. Empty:
	// as the model's sentence-transformers files say (its pooling, and
	// whether it normalizes: archgen.Model.EmbedDefaults), else "last".
	EmbedPooling string
	// Draft, when set, is a smaller model sharing the model's tokenizer
	// that drafts NumDraft tokens a step (default
	// generate.DefaultNumDraft) for a request running alone: speculative
	// decoding (batch.Options.Draft). A request sets "speculative": false
	// to decode without it; its usage counts the drafted tokens kept and
	// rejected (completion_tokens_details' accepted_prediction_tokens and
	// rejected_prediction_tokens).
	Draft    *archgen.Model
	NumDraft int
}

// Server answers OpenAI-style requests on one model.
type Server struct {
	m        *archgen.Model
	eng      *batch.Engine
	opts     Options
	created  int64
	stopping atomic.Bool
	nextID   atomic.Int64
	running  atomic.Int64 // generations under way
	met      *metrics
	// responses keeps recent Responses API responses for
	// previous_response_id.
	responses *responseStore
	// embedGate holds a token while an embedding request computes (see
	// embeddings.go).
	embedGate chan struct{}
	// embedOpts are /v1/embeddings' pooling and normalization.
	embedOpts archgen.EmbedOptions
	specState
}

// New starts the batching engine on m.
func New(m *archgen.Model, opts Options) (*Server, error) {
	if m.Tokenizer == nil {
		return nil, archgen.ErrNoTokenizer
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 8
	}
	if opts.DefaultMaxTokens <= 0 {
		opts.DefaultMaxTokens = 512
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	opts.Limits = opts.Limits.withDefaults()
	if opts.EmbedPooling != "" && !slices.Contains(archgen.Poolings, opts.EmbedPooling) {
		return nil, fmt.Errorf("serve: embeddings' pooling %q: want one of %q", opts.EmbedPooling, archgen.Poolings)
	}
	for _, o := range opts.CORSOrigins {
		if err := CheckOrigin(o); err != nil {
			return nil, err
		}
	}
	var eng *batch.Engine
	if m.Net.Info().Encoder {
		// An encoder embeds and scores; it has no engine, and generation
		// requests are refused (notGenerative).
		if opts.Draft != nil {
			return nil, fmt.Errorf("serve: a draft model drafts for generation; %s is an encoder, which does not generate", m.Net.Info().Arch)
		}
	} else {
		bo := batch.Options{MaxBatch: opts.MaxBatch, PromptCacheBytes: opts.PromptCacheBytes,
			KVBudget: opts.KVBudget, KVReserve: opts.KVReserve, MaxQueue: opts.MaxQueue, NumDraft: opts.NumDraft}
		if opts.Draft != nil {
			if err := m.CheckDraft(opts.Draft); err != nil {
				return nil, err
			}
			bo.Draft = opts.Draft.Net
		}
		var err error
		if eng, err = batch.New(m.Net, bo); err != nil {
			return nil, err
		}
	}
	if opts.KeptResponses == 0 {
		opts.KeptResponses = 1024
	}
	s := &Server{m: m, eng: eng, opts: opts, created: time.Now().Unix(), met: newMetrics(),
		responses: newResponseStore(opts.KeptResponses), embedGate: make(chan struct{}, 1)}
	s.embedOpts.Pooling = opts.EmbedPooling
	if opts.EmbedPooling == "" {
		d, ok, err := m.EmbedDefaults()
		switch {
		case err != nil:
			pooling := m.Net.Info().Pooling
			if pooling == "" {
				pooling = archgen.PoolLast
			}
			s.logf("embeddings: %v: pooling by the model's default (%s), normalized", err, pooling)
		case ok:
			s.embedOpts = d
		}
	}
	return s, nil
}

// Close stops taking requests, lets those under way end, and stops the
// engine.
func (s *Server) Close() {
	s.stopping.Store(true)
	if s.eng != nil {
		s.eng.Close()
	}
}

// stats are the engine's counters; zero for an encoder, which has none.
func (s *Server) stats() batch.Stats {
	if s.eng == nil {
		return batch.Stats{}
	}
	return s.eng.Stats()
}

// notGenerative is the answer to a generation request on an encoder.
func (s *Server) notGenerative() *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "model_not_supported",
		Message: fmt.Sprintf("the model (%s) is an encoder: it answers POST /v1/embeddings and POST /v1/rerank, not generation", s.m.Net.Info().Arch)}
}

// Stopping marks the server as going down: /health says so and new
// generations are refused with 503.
func (s *Server) Stopping() { s.stopping.Store(true) }

// Running is the number of generations under way (queued or decoding),
// for a drain to wait on.
func (s *Server) Running() int { return int(s.running.Load()) }

// Handler routes the API's paths.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /metrics", s.metricsPage)
	mux.HandleFunc("POST /v1/chat/completions", endpoint(s, s.parseChat))
	mux.HandleFunc("POST /v1/completions", endpoint(s, s.parseCompletion))
	mux.HandleFunc("POST /v1/messages", endpoint(s, s.parseMessagesRequest))
	mux.HandleFunc("POST /v1/messages/count_tokens", s.countTokens)
	mux.HandleFunc("POST /v1/responses", endpoint(s, s.parseResponses))
	mux.HandleFunc("GET /v1/responses/{id}", s.getResponse)
	mux.HandleFunc("DELETE /v1/responses/{id}", s.deleteResponse)
	mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	mux.HandleFunc("POST /v1/rerank", s.rerank)
	mux.HandleFunc("POST /rerank", s.rerank)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: fmt.Sprintf("no route %s %s (GET /v1/models, GET /health, GET /metrics, POST /v1/chat/completions, POST /v1/completions, POST /v1/messages, POST /v1/messages/count_tokens, POST /v1/responses, GET and DELETE /v1/responses/{id}, POST /v1/embeddings, POST /v1/rerank)", r.Method, r.URL.Path)})
	})
	return s.count(s.recoverer(s.cors(s.authorize(mux))))
}

// authorize lets a request through when no key is set, when it is GET
// /health (for load balancers and probes), or when its bearer token is
// one of the keys; it answers others 401. Every key is compared, each in
// constant time, so that neither a key's bytes nor its place in the list
// shows in the answer's timing.
func (s *Server) authorize(h http.Handler) http.Handler {
	if len(s.opts.APIKeys) == 0 {
		return h
	}
	keys := make([][]byte, len(s.opts.APIKeys))
	for i, k := range s.opts.APIKeys {
		keys[i] = []byte(k)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/health" || r.URL.Path == "/metrics") {
			h.ServeHTTP(w, r)
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok && r.Header.Get("X-Api-Key") != "" {
			token, ok = r.Header.Get("X-Api-Key"), true // the Messages API's header
		}
		match := 0
		for _, k := range keys {
			match |= subtle.ConstantTimeCompare([]byte(token), k)
		}
		if !ok || match == 0 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="archrun"`)
			msg := "missing API key: send Authorization: Bearer KEY (the server was started with -api-key)"
			if ok {
				msg = "incorrect API key in the Authorization header"
			}
			writeError(w, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key", Message: msg})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// recoverer turns a panic in a handler into a 500 error for that request.
func (s *Server) recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logf("%s %s: panic: %v\n%s", r.Method, r.URL.Path, v, debug.Stack())
				writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
					Message: fmt.Sprintf("internal error: %v", v)})
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Log != nil {
		s.opts.Log.Printf(format, args...)
	}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	var data []any
	for _, id := range append([]string{s.opts.ModelID}, s.opts.Aliases...) {
		data = append(data, map[string]any{"id": id, "object": "model", "created": s.created, "owned_by": "archgen"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	st := s.stats()
	status, code := "ok", http.StatusOK
	if s.stopping.Load() {
		status, code = "stopping", http.StatusServiceUnavailable
	}
	pc := st.PromptCache
	writeJSON(w, code, map[string]any{
		"status": status,
		"model":  s.opts.ModelID,
		"queue": map[string]any{
			"active": st.Active, "prefilling": st.Prefilling, "queued": st.Queued,
			"max_batch": s.opts.MaxBatch, "max_queue": s.opts.MaxQueue,
		},
		"kv": map[string]any{
			"bytes": st.CacheBytes, "budget": st.KVBudget, "reserve": st.KVReserve, "per_position": st.KVPerPosition,
		},
		"prompt_cache": map[string]any{
			"enabled": st.HasPromptCache,
			"hits":    pc.Hits, "misses": pc.Misses, "hit_tokens": pc.HitTokens,
			"evictions": pc.Evictions, "entries": pc.Entries,
			"bytes": pc.Bytes, "max_bytes": pc.MaxBytes,
		},
		"requests":         st.Requests,
		"prompt_tokens":    st.PromptTokens,
		"generated_tokens": st.Generated,
		"steps":            st.Steps,
		"max_active":       st.MaxActive,
		"active_memory":    st.ActiveMemory,
		"peak_memory":      st.PeakMemory,
		"weights_bytes":    s.m.Net.Info().Nbytes,
		"resident_bytes":   ResidentBytes(),
	})
}

// apiError is an error response.
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   string // "" for none
	Code    string // "" for none
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code,
		Message: fmt.Sprintf(format, args...)}
}

// writeError writes e in the OpenAI shape, or for a request to the
// Messages API in its shape ({"type": "error", "error": {"type",
// "message"}}, with param and code beside them).
func writeError(w http.ResponseWriter, e *apiError) {
	entry := entryOf(w)
	if entry != nil {
		entry.code = e.Code
	}
	var param, code any
	if e.Param != "" {
		param = e.Param
	}
	if e.Code != "" {
		code = e.Code
	}
	if entry != nil && entry.messagesAPI {
		writeJSON(w, e.Status, map[string]any{"type": "error", "error": map[string]any{
			"type": anthropicErrorType(e.Status), "message": e.Message, "param": param, "code": code,
		}})
		return
	}
	writeJSON(w, e.Status, map[string]any{"error": map[string]any{
		"message": e.Message, "type": e.Type, "param": param, "code": code,
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads the body into v, naming the field of a wrong type. The
// body is bounded by Limits.BodyBytes, and its time by Limits.BodyTimeout.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) *apiError {
	lim := s.opts.Limits
	rc := http.NewResponseController(w)
	// Where the connection takes deadlines (not in httptest's recorder),
	// the body must arrive in time. The deadline is lifted once it has,
	// so that the server's watch for a departing client outlives it; a
	// body that failed keeps it, so that the connection is not held open
	// for the rest of a body that will not come.
	timed := rc.SetReadDeadline(time.Now().Add(lim.BodyTimeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, lim.BodyBytes))
	if timed && err == nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("the body is larger than %d bytes", lim.BodyBytes)}
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "request_timeout",
				Message: fmt.Sprintf("the body did not arrive within %v", lim.BodyTimeout)}
		}
		return badRequest("", "invalid_body", "reading the body: %v", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			field := strings.TrimPrefix(typeErr.Field, "common.") // the embedded struct's Go name
			if field == "" {
				return badRequest("", "invalid_type", "the body: want a JSON object, got a JSON %s", typeErr.Value)
			}
			return badRequest(field, "invalid_type", "%s: want %s, got a JSON %s", field, typeName(typeErr.Type.Kind().String()), typeErr.Value)
		}
		var fe *fieldError
		if errors.As(err, &fe) {
			return badRequest(fe.field, "invalid_type", "%s: %s", fe.field, fe.msg)
		}
		return badRequest("", "invalid_json", "the body is not a JSON object: %v", err)
	}
	return nil
}

// typeName is a Go kind in JSON's words.
func typeName(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "a boolean"
	case kind == "slice":
		return "an array"
	case kind == "struct", kind == "map":
		return "an object"
	}
	return kind
}

// fieldError is a field's value that its own unmarshaler refused.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }
