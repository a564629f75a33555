package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeDrain: after SIGTERM the server keeps listening while a
// generation runs: GET /health answers 503 "stopping" (for load balancers)
// and new generations 503 shutting_down; when -drain-timeout is up the
// running stream is cut off and the process exits 0.
func TestServeDrain(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	bin := serverBinary(t)
	cmd, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2", "-drain-timeout", "2s", "-access-log", "off")
	root := strings.TrimSuffix(base, "/v1")
	resp, err := http.Post(base+"/completions", "application/json",
		strings.NewReader(`{"prompt": "`+counting+`", "max_tokens": 8000, "stream": true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	first, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first, "data: {"), "first line %q", first)
	signalled := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "archrun serve: stopping") }, 5*time.Second, 10*time.Millisecond)

	h, err := http.Get(root + "/health")
	require.NoError(t, err, "the listener stays open while the stream runs")
	var health struct{ Status string }
	require.NoError(t, json.NewDecoder(h.Body).Decode(&health))
	h.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, h.StatusCode)
	assert.Equal(t, "stopping", health.Status)
	a := post(t, root, "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2})
	assert.Equal(t, http.StatusServiceUnavailable, a.status)
	assert.Equal(t, "shutting_down", a.code())

	rest, _ := io.ReadAll(rd) // cut off: no [DONE]
	assert.NotContains(t, string(rest), "[DONE]", "the stream was cut off, not finished")
	waitExit(t, cmd, stderr)
	took := time.Since(signalled)
	assert.GreaterOrEqual(t, took, 2*time.Second, "the drain's time")
	assert.Less(t, took, 20*time.Second)
	assert.Contains(t, stderr.String(), "the drain's 2s are up: cutting off the requests still running")
	assert.Contains(t, stderr.String(), "archrun serve: stopped")
}
