package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/internal/soak"
)

// TestServeSoak: eight clients drive `archrun serve` on SmolLM2 for a
// minute with the soak's mix (whole and streamed chats and completions,
// cancels mid-stream, slow readers, malformed requests, and the agents'
// mix: the Responses and Messages APIs, forced tool calls, JSON-schema
// replies and embeddings, with a chat template that writes tool calls)
// under a KV budget
// that holds about five rows: no request is lost or fails on the server's
// side, no well-formed one is refused, every malformed one is, nothing
// leaks (descriptors, goroutines), and resident memory grows by no more
// than the KV budget, the prompt cache's bound and 1.5 GiB for the
// activations and the C heap. MLX holds about 310 MiB at its peak here;
// the process grew by 0.8-1.0 GiB in runs of one and five minutes: each
// join and leave copies the batch's caches (kv.Batched's Extend and
// Filter), and glibc's arenas keep what those copies freed until the
// batch empties (then the process is back near 270 MiB).
func TestServeSoak(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	bin := serverBinary(t)
	const budget, promptCache = 64 << 20, 64 << 20
	cmd, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2",
		"-kv-budget", "64MiB", "-prompt-cache-bytes", "64MiB", "-access-log", "off", "-chat-template", "testdata/chatml_tools.jinja")
	rep, err := soak.Run(context.Background(), soak.Config{
		Root: strings.TrimSuffix(base, "/v1"), Model: "smollm2", Clients: 8, Duration: time.Minute, Seed: 1,
		PID: cmd.Process.Pid, MaxGrowth: budget + promptCache + 3<<29, Agents: true, Embeddings: true,
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
