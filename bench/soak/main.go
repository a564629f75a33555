// Command soak drives a running OpenAI-compatible server with
// internal/soak's mixed load and prints (and optionally writes as JSON)
// its report: `make bench-soak` runs it against archrun serve and
// llama.cpp's llama-server on the same GGUF.
//
//	go run ./bench/soak -root http://127.0.0.1:8080 -model smollm2 -pid 1234 -clients 32 -duration 10m
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/archgen/archgen/internal/soak"
)

func main() {
	var cfg soak.Config
	flag.StringVar(&cfg.Root, "root", "http://127.0.0.1:8080", "the server's address")
	flag.StringVar(&cfg.Model, "model", "", "the model id requests name")
	flag.StringVar(&cfg.APIKey, "api-key", "", "the bearer token requests carry")
	flag.IntVar(&cfg.Clients, "clients", 32, "clients at once")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long the load runs")
	flag.IntVar(&cfg.PID, "pid", 0, "the server's process, for its memory and descriptors")
	growth := flag.Int64("max-growth", 0, "fail when resident memory grows by more bytes than this (0: not checked)")
	seed := flag.Uint64("seed", 1, "the seed of the clients' mix")
	flag.IntVar(&cfg.PromptWords, "prompt-words", 0, "send only whole chats about a text of this many words (a long-prompt load)")
	flag.IntVar(&cfg.MaxTokens, "max-tokens", 32, "with -prompt-words: the tokens each asks for")
	flag.IntVar(&cfg.Requests, "requests", 0, "requests per client, then stop (0: until -duration)")
	flag.BoolVar(&cfg.Agents, "agents", false, "add the agents' mix: the Responses and Messages APIs, forced tool calls, JSON-schema replies")
	flag.BoolVar(&cfg.Embeddings, "embeddings", false, "with -agents: add /v1/embeddings requests")
	out := flag.String("out", "", "write the report as JSON here")
	flag.Parse()
	cfg.MaxGrowth, cfg.Seed = *growth, *seed
	rep, err := soak.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	fmt.Print(rep.Summary())
	if *out != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*out, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
	}
	if len(rep.Failures) > 0 {
		os.Exit(1)
	}
}
