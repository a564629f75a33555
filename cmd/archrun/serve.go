package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/serve"
)

const serveDoc = `Serves the model over HTTP with the OpenAI API: GET /v1/models, GET /health
(the queue and the prompt cache's hits, misses and bytes), GET /metrics (the
same and more in Prometheus's text format), POST
/v1/chat/completions and POST /v1/completions, streamed (server-sent events)
or not. Requests decode together in one batch (at most -max-batch at once,
the rest queue); a prompt cache keeps the KV of earlier prompts for later
ones that start the same way. Sampling is greedy unless a request sets
temperature. With -api-key (or -api-key-file, or ARCHGEN_API_KEY) every
path but GET /health and GET /metrics needs Authorization: Bearer KEY;
without one the
server warns when it listens beyond the loopback address. SIGTERM or Ctrl-C
stops taking requests, lets running ones
finish, and exits. "go doc github.com/archgen/archgen/serve" describes the
requests and errors.`

func (a *app) serve(args []string) error {
	c := a.flags("serve", "(-model PATH | -gguf FILE | -hf ORG/NAME) [-host 127.0.0.1] [-port 8080] [flags]", serveDoc)
	var src source
	src.flags(c.FlagSet, true)
	hf := c.String("hf", "", "a Hugging Face repo id (ORG/NAME), read offline from the cache (-model takes one too)")
	host := c.String("host", "127.0.0.1", "the address to listen on")
	port := c.Int("port", 8080, "the port to listen on (0: any free one, printed)")
	maxBatch := c.Int("max-batch", 8, "requests decoding at once; the rest queue")
	cacheSize := c.String("prompt-cache-bytes", "1GiB", "the prompt cache's bound (8GB, 512MiB, bytes; 0: no cache)")
	ctxLen := c.Int("context-length", 0, "refuse prompts of this many tokens or more (default: the model's max_position_embeddings)")
	maxTokens := c.Int("max-tokens", 512, "a request's token budget when it gives none")
	name := c.String("served-model-name", "", "the model id clients give (default: the model's path as given)")
	apiKey := c.String("api-key", "", "require this bearer token (Authorization: Bearer KEY) on every path but GET /health (or ARCHGEN_API_KEY)")
	apiKeyFile := c.String("api-key-file", "", "a file of accepted keys, one a line (blank lines and # comments skipped)")
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
	if *maxBatch < 1 {
		return usagef("-max-batch %d: want at least 1", *maxBatch)
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

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := src.load(ctx, true)
	if err != nil {
		return err
	}
	defer m.Free()
	id := *name
	if id == "" {
		id = src.path()
	}
	limit := *ctxLen
	if limit == 0 {
		limit = contextLength(m)
	}
	logger := log.New(a.stderr, "archrun serve: ", log.LstdFlags)
	srv, err := serve.New(m, serve.Options{
		ModelID: id, ContextLength: limit, MaxBatch: *maxBatch,
		PromptCacheBytes: int64(cacheBytes), DefaultMaxTokens: *maxTokens, Log: logger, APIKeys: keys,
	})
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second, ErrorLog: logger}
	fmt.Fprintf(a.stderr, "archrun serve: %s on http://%s/v1 (max batch %d, prompt cache %d bytes, context %d tokens)\n",
		id, ln.Addr(), *maxBatch, cacheBytes, limit)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	stop() // a second signal ends the process at once
	fmt.Fprintln(a.stderr, "archrun serve: stopping: no new requests; waiting for those under way")
	srv.Stopping()
	err = hs.Shutdown(context.Background())
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
