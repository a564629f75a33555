package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generate/batch"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/serve"
)

const serveDoc = `Serves the model over HTTP with the OpenAI API: GET /v1/models, GET /health
(the queue and the prompt cache's hits, misses and bytes), GET /metrics (the
same and more in Prometheus's text format), POST /v1/chat/completions and
POST /v1/completions, streamed (server-sent events) or not. Requests decode
together in one batch (at most -max-batch at once, the rest queue); a
prompt cache keeps the KV of earlier prompts for later ones that start the
same way. Sampling is greedy unless a request sets temperature.

With -api-key (or -api-key-file, or ARCHGEN_API_KEY) every path but GET
/health and GET /metrics needs Authorization: Bearer KEY; without one the
server warns when it listens beyond the loopback address. Browsers may call
it from the -cors-origins only. Requests past a -limit-* flag get a 400
(code limit_exceeded) naming the field; a client that sends its headers or
body too slowly, or stops reading its stream, is cut off (-header-timeout,
-body-timeout, -write-timeout), and -request-timeout bounds a generation.
Each request writes a JSON access record (-access-log), without its prompt
unless -log-prompts. SIGTERM or Ctrl-C stops taking requests (GET /health
answers 503 "stopping"), lets running ones finish for up to -drain-timeout,
cuts off the rest, and exits. "go doc github.com/archgen/archgen/serve"
describes the requests and errors.`

func (a *app) serve(args []string) error {
	c := a.flags("serve", "(-model PATH | -gguf FILE | -hf ORG/NAME) [-host 127.0.0.1] [-port 8080] [flags]", serveDoc)
	var src source
	src.flags(c.FlagSet, true)
	hf := c.String("hf", "", "a Hugging Face repo id (ORG/NAME[@REVISION]): from the cache, downloaded first when missing (-offline: the cache alone; -model takes one too)")
	host := c.String("host", "127.0.0.1", "the address to listen on")
	port := c.Int("port", 8080, "the port to listen on (0: any free one, printed)")
	maxBatch := c.Int("max-batch", 8, "requests decoding at once; the rest queue")
	cacheSize := c.String("prompt-cache-bytes", "1GiB", "the prompt cache's bound (8GB, 512MiB, bytes; 0: no cache)")
	memoryBudget := c.String("memory-budget", "", "the bound on the process's memory beyond the weights (a size): the batch's KV caches and what the process holds beside them, measured at start (its heap and libraries, a prompt chunk's activations, which bound MLX's buffer cache too) and the prompt cache (-prompt-cache-bytes); requests wait until theirs fits. Replaces -kv-budget")
	kvBudget := c.String("kv-budget", "auto", "the bound on the batch's KV caches: requests wait until theirs fits (a size; auto: 80% of the memory available once the model is loaded, less the prompt cache; off: none)")
	maxQueue := c.Int("max-queue", 256, "requests that may wait for room; more get 429 with Retry-After (0: no bound)")
	ctxLen := c.Int("context-length", 0, "refuse prompts of this many tokens or more (default: the model's max_position_embeddings)")
	maxTokens := c.Int("max-tokens", 512, "a request's token budget when it gives none")
	name := c.String("served-model-name", "", "the model id /v1/models lists and responses carry (default: the model's path as given)")
	aliases := c.String("alias", "", "more names /v1/models lists for the model, comma-separated; a request naming one gets it back")
	pooling := c.String("pooling", "", "how /v1/embeddings pools an input's final hidden states: last (the last token's), mean or cls (the first token's; default: as the model folder's sentence-transformers files say, else the model's own: last for a decoder, mean for BERT)")
	strictModel := c.Bool("strict-model", false, "refuse (404) requests naming a model other than -served-model-name or an -alias (by default any name is served)")
	apiKey := c.String("api-key", "", "require this bearer token (Authorization: Bearer KEY) on every path but GET /health (or ARCHGEN_API_KEY)")
	apiKeyFile := c.String("api-key-file", "", "a file of accepted keys, one a line (blank lines and # comments skipped)")
	d := serve.DefaultLimits
	bodyLimit := c.String("limit-body", "16MiB", "refuse request bodies larger than this (413)")
	limMessages := c.Int("limit-messages", d.Messages, "refuse chats of more messages")
	limTools := c.Int("limit-tools", d.Tools, "refuse chats of more tools")
	limPrompt := c.Int("limit-prompt-tokens", 0, "refuse prompts of more tokens (0: the context alone bounds them)")
	limMax := c.Int("limit-max-tokens", 0, "refuse max_tokens above this (0: the context alone bounds it)")
	limStops := c.Int("limit-stops", d.Stops, "refuse more stop strings")
	limStopBytes := c.Int("limit-stop-bytes", d.StopBytes, "refuse longer stop strings")
	bodyTimeout := c.Duration("body-timeout", d.BodyTimeout, "a client's time to send its body once its headers are in (408 past it)")
	headerTimeout := c.Duration("header-timeout", 10*time.Second, "a client's time to send a request's headers (the connection closes past it)")
	idleTimeout := c.Duration("idle-timeout", 2*time.Minute, "how long a kept-alive connection may wait for its next request")
	requestTimeout := c.Duration("request-timeout", 0, "stop a generation this long after it arrives, answering 504 (0: no bound)")
	writeTimeout := c.Duration("write-timeout", 30*time.Second, "drop a client that takes no streamed event (or whole response) for this long, freeing its row")
	heapMmap := c.String("heap-mmap-threshold", "1MiB", "C heap allocations of this size or more get their own mapping, returned to the system when freed (0: glibc's own, which holds on to freed buffers)")
	sendBuffer := c.String("send-buffer", "256KiB", "each connection's kernel send buffer: what a client that stops reading can hold before -write-timeout runs")
	drainTimeout := c.Duration("drain-timeout", time.Minute, "after SIGTERM, how long running requests may take before they are cut off")
	corsOrigins := c.String("cors-origins", "", "origins browsers may call the API from, comma-separated (https://app.example.com; *: any); none by default")
	accessLog := c.String("access-log", "-", "where each request's JSON access record goes: - (stderr), a file (appended to), or off")
	logPrompts := c.Bool("log-prompts", false, "put each generation's prompt text in its access record")
	draftModel := c.String("draft-model", "", "a smaller model sharing the model's tokenizer (a path or repo id) that drafts tokens for a request running alone: speculative decoding (a request's \"speculative\": false opts out)")
	numDraft := c.Int("num-draft-tokens", generate.DefaultNumDraft, "tokens the draft model drafts a step")
	if err := a.parse(c, args); err != nil {
		return err
	}
	if *hf != "" {
		if src.dir != "" || src.gguf != "" {
			return usagef("-hf, -model and -gguf exclude each other")
		}
		src.dir = *hf
	}
	if err := src.check(); err != nil {
		return err
	}
	if *port < 0 || *port > 65535 {
		return usagef("-port %d: want 0 to 65535", *port)
	}
	if *numDraft < 1 {
		return usagef("-num-draft-tokens %d: want at least 1", *numDraft)
	}
	if *maxBatch < 1 {
		return usagef("-max-batch %d: want at least 1", *maxBatch)
	}
	if *pooling != "" && !slices.Contains(archgen.Poolings, *pooling) {
		return usagef("-pooling %q: want last, mean or cls", *pooling)
	}
	if *maxTokens < 1 {
		return usagef("-max-tokens %d: want at least 1", *maxTokens)
	}
	if *ctxLen < 0 {
		return usagef("-context-length %d: want a positive number of tokens", *ctxLen)
	}
	keys, err := apiKeys(*apiKey, *apiKeyFile, os.Getenv("ARCHGEN_API_KEY"))
	if err != nil {
		return err
	}
	if *maxQueue < 0 {
		return usagef("-max-queue %d: want a positive number (0: no bound)", *maxQueue)
	}
	var budget, memBudget uint64
	if *kvBudget != "auto" && *kvBudget != "off" {
		if budget, err = parseSize(*kvBudget); err != nil {
			return usagef("-kv-budget %q: %v (or auto, off)", *kvBudget, err)
		}
	}
	if *memoryBudget != "" {
		if memBudget, err = parseSize(*memoryBudget); err != nil || memBudget == 0 {
			return usagef("-memory-budget %q: want a size (2GiB, 800MiB, bytes)", *memoryBudget)
		}
		if *kvBudget != "auto" {
			return usagef("-memory-budget and -kv-budget exclude each other: the memory budget holds the KV caches")
		}
	}
	body, err := parseSize(*bodyLimit)
	if err != nil {
		return usagef("-limit-body %q: %v", *bodyLimit, err)
	}
	limits := serve.Limits{BodyBytes: int64(body), BodyTimeout: *bodyTimeout}
	for _, l := range []struct {
		name string
		v    int
		dst  *int
	}{
		{"-limit-messages", *limMessages, &limits.Messages}, {"-limit-tools", *limTools, &limits.Tools},
		{"-limit-prompt-tokens", *limPrompt, &limits.PromptTokens}, {"-limit-max-tokens", *limMax, &limits.MaxTokens},
		{"-limit-stops", *limStops, &limits.Stops}, {"-limit-stop-bytes", *limStopBytes, &limits.StopBytes},
	} {
		switch {
		case l.v < 0:
			return usagef("%s %d: want a positive number (0: no bound)", l.name, l.v)
		case l.v == 0:
			*l.dst = -1 // no bound
		default:
			*l.dst = l.v
		}
	}
	for _, t := range []struct {
		name string
		v    time.Duration
		zero bool // 0 means no bound
	}{
		{"-body-timeout", *bodyTimeout, false}, {"-header-timeout", *headerTimeout, false}, {"-idle-timeout", *idleTimeout, false},
		{"-request-timeout", *requestTimeout, true}, {"-write-timeout", *writeTimeout, false}, {"-drain-timeout", *drainTimeout, false},
	} {
		if t.v < 0 || (t.v == 0 && !t.zero) {
			return usagef("%s %v: want a positive duration (30s, 5m)", t.name, t.v)
		}
	}
	var heapThreshold uint64
	if *heapMmap != "0" {
		if heapThreshold, err = parseSize(*heapMmap); err != nil || heapThreshold > 1<<30 {
			return usagef("-heap-mmap-threshold %q: want a size up to 1GiB such as 1MiB, or 0", *heapMmap)
		}
	}
	sendBytes, err := parseSize(*sendBuffer)
	if err != nil || sendBytes > 1<<30 {
		return usagef("-send-buffer %q: want a size up to 1GiB such as 256KiB", *sendBuffer)
	}
	origins := splitList(*corsOrigins)
	for _, o := range origins {
		if err := serve.CheckOrigin(o); err != nil {
			return usagef("-cors-origins: %v", err)
		}
	}
	var access *slog.Logger
	switch *accessLog {
	case "off":
	case "-":
		access = slog.New(slog.NewJSONHandler(a.stderr, nil))
	default:
		f, err := os.OpenFile(*accessLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("-access-log: %w", err)
		}
		defer f.Close()
		access = slog.New(slog.NewJSONHandler(f, nil))
	}
	var cacheBytes uint64
	if *cacheSize != "0" {
		n, err := parseSize(*cacheSize)
		if err != nil {
			return usagef("-prompt-cache-bytes %q: %v", *cacheSize, err)
		}
		cacheBytes = n
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	if ip := net.ParseIP(*host); len(keys) == 0 && (ip == nil || !ip.IsLoopback()) && *host != "localhost" {
		fmt.Fprintf(a.stderr, "archrun serve: warning: listening on %s without an API key: anyone who reaches the port can use the model (-api-key, -api-key-file or ARCHGEN_API_KEY)\n", *host)
	}
	defer ln.Close()

	// buffers of -heap-mmap-threshold or more straight back to the system
	// when freed: prompt chunks' activations, the prompt cache's copies and
	// the batch's growth come and go (see mlx.SetHeapMmapThreshold)
	if heapThreshold > 0 {
		mlx.SetHeapMmapThreshold(int(heapThreshold))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := src.load(ctx, true)
	if err != nil {
		return err
	}
	defer m.Free()
	draft, err := src.loadDraft(ctx, *draftModel)
	if err != nil {
		return err
	}
	if draft != nil {
		defer draft.Free()
	}
	id := *name
	if id == "" {
		id = src.path()
	}
	limit := *ctxLen
	if limit == 0 {
		limit = contextLength(m)
	}
	var reserve int64
	if memBudget > 0 {
		r, err := processReserve(m, min(2048, limit))
		if err != nil {
			return err
		}
		r.promptCache = int64(cacheBytes)
		if int64(memBudget) <= r.total() {
			return fmt.Errorf("-memory-budget %s: the process holds %d MiB beside its caches (%s), which leaves the caches nothing", *memoryBudget, r.total()>>20, r)
		}
		budget, reserve = memBudget, r.total()
		fmt.Fprintf(a.stderr, "archrun serve: memory budget %d MiB: %s reserved, %d MiB for the KV caches\n", memBudget>>20, r, (int64(memBudget)-reserve)>>20)
	} else if *kvBudget == "auto" {
		if avail := memAvailable(); avail > 0 {
			if b := int64(avail)*8/10 - int64(cacheBytes); b > 0 {
				budget = uint64(b)
			}
		}
		if budget == 0 {
			fmt.Fprintln(a.stderr, "archrun serve: warning: the memory available is unknown or spent: no KV budget (-kv-budget SIZE sets one)")
		}
	}
	logger := log.New(a.stderr, "archrun serve: ", log.LstdFlags)
	srv, err := serve.New(m, serve.Options{
		ModelID: id, Aliases: splitList(*aliases), StrictModel: *strictModel, EmbedPooling: *pooling, ContextLength: limit, MaxBatch: *maxBatch,
		PromptCacheBytes: int64(cacheBytes), DefaultMaxTokens: *maxTokens, Log: logger, APIKeys: keys,
		KVBudget: int64(budget), KVReserve: reserve, MaxQueue: *maxQueue,
		Limits: limits, RequestTimeout: *requestTimeout, WriteTimeout: *writeTimeout,
		CORSOrigins: origins, AccessLog: access, LogPrompts: *logPrompts, Draft: draft, NumDraft: *numDraft,
	})
	if err != nil {
		return usagef("%v", err)
	}
	// Requests' contexts descend from base: cancelling it cuts off those
	// still running when the drain's time is up.
	base, cutOff := context.WithCancel(context.Background())
	defer cutOff()
	hs := &http.Server{
		Handler: srv.Handler(), ErrorLog: logger,
		ReadHeaderTimeout: *headerTimeout, IdleTimeout: *idleTimeout,
		BaseContext: func(net.Listener) context.Context { return base },
		// A fixed send buffer bounds what a client that stops reading holds
		// in the kernel (autotuning grows it to megabytes), so that the
		// write timeout finds such a client after that much, not after
		// minutes of tokens.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetWriteBuffer(int(sendBytes))
			}
			return ctx
		},
	}
	if m.Net.Info().Encoder {
		what := "embeddings"
		if m.Labels() > 0 {
			what = "embeddings and rerank"
		}
		fmt.Fprintf(a.stderr, "archrun serve: %s on http://%s/v1 (an encoder: %s, no generation; context %d tokens)\n", id, ln.Addr(), what, limit)
	} else {
		fmt.Fprintf(a.stderr, "archrun serve: %s on http://%s/v1 (max batch %d, prompt cache %d bytes, KV budget %d bytes, context %d tokens)\n",
			id, ln.Addr(), *maxBatch, cacheBytes, budget, limit)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	stop() // a second signal ends the process at once
	fmt.Fprintf(a.stderr, "archrun serve: stopping: no new requests; waiting up to %v for those under way\n", *drainTimeout)
	srv.Stopping()
	drain, done := context.WithTimeout(context.Background(), *drainTimeout)
	defer done()
	// The listener stays open while generations run, so that probes see
	// GET /health answer 503 "stopping" and new requests get 503
	// shutting_down rather than a refused connection.
	tick := time.NewTicker(20 * time.Millisecond)
	for srv.Running() > 0 && drain.Err() == nil {
		select {
		case <-tick.C:
		case <-drain.Done():
		}
	}
	tick.Stop()
	err = hs.Shutdown(drain)
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(a.stderr, "archrun serve: the drain's %v are up: cutting off the requests still running\n", *drainTimeout)
		cutOff()
		err = hs.Close()
	}
	srv.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	fmt.Fprintln(a.stderr, "archrun serve: stopped")
	return nil
}

// apiKeys gathers the accepted keys: -api-key, each line of -api-key-file
// (blank lines and # comments skipped) and ARCHGEN_API_KEY. A key file
// that names none is an error, not an open server.
func apiKeys(flagKey, file, env string) ([]string, error) {
	var keys []string
	for _, k := range []string{flagKey, env} {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	if file == "" {
		return keys, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("-api-key-file: %w", err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("-api-key-file %s: line %q holds a space; one key a line", file, line)
		}
		keys = append(keys, line)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("-api-key-file %s: no keys in it", file)
	}
	return keys, nil
}

// contextLength is the model's context, from config.json's
// max_position_embeddings (a model directory) or the tokenizer's
// model_max_length (which a GGUF's context_length fills); 0 if neither
// says.
func contextLength(m *archgen.Model) int {
	if m.Source.Kind == archgen.KindDir {
		if data, err := os.ReadFile(filepath.Join(m.Source.Path, "config.json")); err == nil {
			var cfg struct {
				N int `json:"max_position_embeddings"`
			}
			if json.Unmarshal(data, &cfg) == nil && cfg.N > 0 {
				return cfg.N
			}
		}
	}
	if n := m.Tokenizer.Config.ModelMaxLength; n > 0 && n < 1<<31 {
		return int(n)
	}
	return 0
}

// memAvailable is the memory the system can give without swapping, from
// /proc/meminfo's MemAvailable (0 where it cannot be read).
func memAvailable() uint64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if n, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					return n << 10
				}
			}
		}
	}
	return 0
}

// reserve is what the process holds beside the batch's caches, for a
// memory budget: its own memory beyond the weights once loaded, and the
// activations of a prompt chunk.
type reserve struct {
	own, activations, promptCache int64
}

func (r reserve) total() int64 { return r.own + r.activations + r.promptCache }

func (r reserve) String() string {
	return fmt.Sprintf("%d MiB (heap and libraries %d MiB, a prompt chunk's activations %d MiB, the prompt cache %d MiB)",
		r.total()>>20, r.own>>20, r.activations>>20, r.promptCache>>20)
}

// processReserve measures the reserve: the resident memory beyond the
// weights, and the activations of a prompt chunk of n tokens as the batch
// runs one. MLX's buffer cache is bounded to those activations, so that
// what a step frees stays within them.
func processReserve(m *archgen.Model, n int) (reserve, error) {
	var r reserve
	mlx.ClearCache()
	r.own = max(0, serve.ResidentBytes()-int64(m.Net.Info().Nbytes))
	act, err := batch.ChunkActivations(m.Net, n, nil)
	mlx.ClearCache()
	if err != nil {
		return r, err
	}
	r.activations = act
	mlx.SetCacheLimit(uint64(act))
	return r, nil
}

// splitList is a comma-separated flag's items, trimmed, empty ones left
// out.
func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
