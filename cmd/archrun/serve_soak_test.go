package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/internal/soak"
)

// TestServeSoak: eight clients drive `archrun serve` on SmolLM2 for
// thirty seconds with the soak's mix (whole and streamed chats and completions,
// cancels mid-stream, slow readers, malformed requests, and the agents'
// mix: the Responses and Messages APIs, forced tool calls, JSON-schema
// replies and embeddings, with a chat template that writes tool calls)
// under a memory budget for the whole process but its weights, which
// holds a few rows beside a prompt chunk's activations and the prompt
// cache: no request is lost or fails on the server's side, no well-formed
// one is refused, every malformed one is, nothing leaks (descriptors,
// goroutines), and the resident peak stays within the weights plus the
// budget, as `make bench-soak` checks at 32 clients.
func TestServeSoak(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	bin := serverBinary(t)
	const budget = 768 << 20
	cmd, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2",
		"-memory-budget", "768MiB", "-prompt-cache-bytes", "64MiB", "-access-log", "off", "-chat-template", "testdata/chatml_tools.jinja")
	root := strings.TrimSuffix(base, "/v1")
	var health struct {
		Weights  int64 `json:"weights_bytes"`
		Resident int64 `json:"resident_bytes"`
	}
	resp, err := http.Get(root + "/health")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&health))
	resp.Body.Close()
	require.Positive(t, health.Weights, "/health reports the weights' bytes")
	rep, err := soak.Run(context.Background(), soak.Config{
		Root: root, Model: "smollm2", Clients: 8, Duration: 30 * time.Second, Seed: 1,
		PID: cmd.Process.Pid, MaxGrowth: health.Weights + budget - health.Resident, Agents: true, Embeddings: true,
	})
	require.NoError(t, err)
	t.Logf("soak:\n%s", rep.Summary())
	assert.Empty(t, rep.Failures, "server log:\n%s", tail(stderr.String()))
	for _, kind := range []string{soak.ChatWhole, soak.ChatStream, soak.CompletionWhole, soak.CompletionStream, soak.Cancel, soak.SlowReader,
		soak.ResponsesWhole, soak.ResponsesStream, soak.MessagesWhole, soak.MessagesStream, soak.ToolCall, soak.JSONSchema, soak.Embeddings} {
		assert.Positive(t, rep.ByKind[kind][soak.OK]+rep.ByKind[kind][soak.Cancelled], "no %s answered", kind)
	}
	assert.Positive(t, rep.ByKind[soak.Malformed][soak.Rejected], "no malformed request sent")
	assert.GreaterOrEqual(t, rep.GoroutinesBefore, 0, "the server's /metrics reports its goroutines")
}
