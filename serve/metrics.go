package serve

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/archgen/archgen/runtime/mlx"
)

// metrics are the server's counters and latency histograms, written by
// GET /metrics in Prometheus's text format beside the engine's gauges.
type metrics struct {
	mu       sync.Mutex
	requests map[[2]string]uint64 // (path, status) -> answered requests
	prompt   uint64               // prompt tokens of answered generations
	output   uint64               // tokens they generated
	ttft     histogram            // submit to first token, seconds
	itl      histogram            // between a request's tokens, seconds
}

// histogram counts observations under each upper bound (cumulative when
// written) with their sum.
type histogram struct {
	bounds []float64
	counts []uint64 // per bound, then +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds ...float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // the first bound >= v
	h.counts[i]++
	h.sum += v
	h.n++
}

func newMetrics() *metrics {
	return &metrics{
		requests: map[[2]string]uint64{},
		ttft:     newHistogram(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
		itl:      newHistogram(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
	}
}

// routes are the paths requests are counted under; any other path counts
// as "other", so that clients cannot grow the label set.
var routes = []string{"/v1/models", "/health", "/metrics", "/v1/chat/completions", "/v1/completions",
	"/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/embeddings", "/v1/rerank", "/rerank"}

// statusRecorder keeps the status a handler answers with, and the
// request's access record.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	entry  accessEntry
}

// accessEntry is what a request's access record says beyond the HTTP
// exchange: the error code it got, and for a generation its id, tokens,
// finish and time to first token (and its prompt, where asked).
type accessEntry struct {
	code                       string
	id                         string
	prompt, completion, cached int
	finish                     string
	ttft                       time.Duration
	promptText                 string
	messagesAPI                bool // errors take the Messages API's shape
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Flush passes a stream's flushes through.
func (r *statusRecorder) Flush() { _ = r.FlushError() }

// FlushError flushes and says whether the client took it (what
// http.ResponseController.Flush calls).
func (r *statusRecorder) FlushError() error {
	return http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// count records each request's path and status once it is answered, and
// writes its access record.
func (s *Server) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		rec.entry.messagesAPI = strings.HasPrefix(r.URL.Path, "/v1/messages")
		start := time.Now()
		defer func() {
			path := r.URL.Path
			if !slices.Contains(routes, path) {
				path = "other"
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			s.met.mu.Lock()
			s.met.requests[[2]string{path, strconv.Itoa(status)}]++
			s.met.mu.Unlock()
			if s.opts.AccessLog != nil {
				s.access(r, rec, status, time.Since(start))
			}
		}()
		h.ServeHTTP(rec, r)
	})
}

// access writes a request's access record.
func (s *Server) access(r *http.Request, rec *statusRecorder, status int, d time.Duration) {
	e := &rec.entry
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.Int64("bytes", rec.bytes),
		slog.String("remote", r.RemoteAddr),
	}
	if e.code != "" {
		attrs = append(attrs, slog.String("error", e.code))
	}
	if e.id != "" {
		attrs = append(attrs, slog.String("id", e.id), slog.Int("prompt_tokens", e.prompt),
			slog.Int("completion_tokens", e.completion), slog.Int("cached_tokens", e.cached))
		if e.finish != "" {
			attrs = append(attrs, slog.String("finish_reason", e.finish))
		}
		if e.ttft > 0 {
			attrs = append(attrs, slog.Float64("ttft_ms", float64(e.ttft.Microseconds())/1000))
		}
		if s.opts.LogPrompts {
			attrs = append(attrs, slog.String("prompt", e.promptText))
		}
	}
	s.opts.AccessLog.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}

// entryOf is the access entry of the request w answers (nil outside the
// server's handler chain).
func entryOf(w http.ResponseWriter) *accessEntry {
	for {
		switch v := w.(type) {
		case *statusRecorder:
			return &v.entry
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return nil
		}
	}
}

// generated records a finished generation's tokens.
func (m *metrics) generated(prompt, output int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prompt += uint64(prompt)
	m.output += uint64(output)
}

// latency records a time to first token (first) or between tokens.
func (m *metrics) latency(first bool, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if first {
		m.ttft.observe(d.Seconds())
	} else {
		m.itl.observe(d.Seconds())
	}
}

// metricsPage writes GET /metrics: Prometheus's text exposition format.
func (s *Server) metricsPage(w http.ResponseWriter, r *http.Request) {
	st := s.stats()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m := s.met
	m.mu.Lock()
	defer m.mu.Unlock()
	pw := promWriter{w: w}
	pw.family("archgen_requests_total", "counter", "Requests answered, by path and HTTP status.")
	keys := make([][2]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if a[0] != b[0] {
			return compare(a[0], b[0])
		}
		return compare(a[1], b[1])
	})
	for _, k := range keys {
		pw.sample("archgen_requests_total", fmt.Sprintf(`{path=%q,status=%q}`, k[0], k[1]), float64(m.requests[k]))
	}
	pw.gauge("archgen_prompt_tokens_total", "counter", "Prompt tokens of the generations answered.", float64(m.prompt))
	pw.gauge("archgen_generated_tokens_total", "counter", "Tokens the generations answered produced.", float64(m.output))
	pw.gauge("archgen_queue_active", "gauge", "Sequences decoding in the batch.", float64(st.Active))
	pw.gauge("archgen_queue_prefilling", "gauge", "Prompts being prefilled.", float64(st.Prefilling))
	pw.gauge("archgen_queue_waiting", "gauge", "Requests waiting for room in the batch.", float64(st.Queued))
	pw.gauge("archgen_batch_max", "gauge", "The most requests that decode at once (-max-batch).", float64(s.opts.MaxBatch))
	pc := st.PromptCache
	pw.gauge("archgen_prompt_cache_hits_total", "counter", "Prompts that found a cached prefix.", float64(pc.Hits))
	pw.gauge("archgen_prompt_cache_misses_total", "counter", "Prompts that found none.", float64(pc.Misses))
	pw.gauge("archgen_prompt_cache_hit_tokens_total", "counter", "Prompt tokens taken from the cache.", float64(pc.HitTokens))
	pw.gauge("archgen_prompt_cache_bytes", "gauge", "Bytes the prompt cache holds.", float64(pc.Bytes))
	pw.gauge("archgen_prompt_cache_max_bytes", "gauge", "The prompt cache's bound.", float64(pc.MaxBytes))
	pw.gauge("archgen_memory_active_bytes", "gauge", "Memory MLX holds now (weights, caches, buffers).", float64(st.ActiveMemory))
	pw.gauge("archgen_memory_peak_bytes", "gauge", "The most memory MLX has held.", float64(st.PeakMemory))
	pw.gauge("archgen_memory_cache_bytes", "gauge", "Memory MLX keeps for reuse (freed buffers).", float64(mlx.CacheMemory()))
	pw.gauge("go_goroutines", "gauge", "Goroutines that exist now.", float64(runtime.NumGoroutine()))
	if n, err := os.ReadDir("/proc/self/fd"); err == nil {
		pw.gauge("process_open_fds", "gauge", "Open file descriptors.", float64(len(n)))
	}
	if r := ResidentBytes(); r > 0 {
		pw.gauge("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", float64(r))
	}
	pw.gauge("archgen_kv_bytes", "gauge", "Bytes the batch's KV caches hold.", float64(st.CacheBytes))
	pw.gauge("archgen_kv_copied_bytes_total", "counter", "Bytes cache writes copied whole rather than writing in place (a reused prompt cache entry's, each time it is reused; a batch's never).", float64(mlx.CacheRowsCopied()))
	pw.gauge("archgen_kv_budget_bytes", "gauge", "The bound on the batch's KV caches (0: none).", float64(st.KVBudget))
	pw.gauge("archgen_kv_reserve_bytes", "gauge", "The part of the budget the caches may not take (the process's own memory, with -memory-budget).", float64(st.KVReserve))
	pw.histogram("archgen_time_to_first_token_seconds", "From a generation's submission to its first token.", &m.ttft)
	pw.histogram("archgen_inter_token_seconds", "Between one token of a generation and the next.", &m.itl)
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// promWriter writes metric families in the text format.
type promWriter struct{ w io.Writer }

func (p promWriter) family(name, kind, help string) {
	fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
}

func (p promWriter) sample(name, labels string, v float64) {
	fmt.Fprintf(p.w, "%s%s %s\n", name, labels, strconv.FormatFloat(v, 'g', -1, 64))
}

func (p promWriter) gauge(name, kind, help string, v float64) {
	p.family(name, kind, help)
	p.sample(name, "", v)
}

func (p promWriter) histogram(name, help string, h *histogram) {
	p.family(name, "histogram", help)
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		p.sample(name+"_bucket", fmt.Sprintf(`{le=%q}`, strconv.FormatFloat(b, 'g', -1, 64)), float64(cum))
	}
	p.sample(name+"_bucket", `{le="+Inf"}`, float64(h.n))
	p.sample(name+"_sum", "", h.sum)
	p.sample(name+"_count", "", float64(h.n))
}

// ResidentBytes is the process's resident memory from /proc/self/statm (0
// where there is none).
func ResidentBytes() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
