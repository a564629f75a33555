package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// apiAnswer is a response's status and its OpenAI-style error, if any.
type apiAnswer struct {
	status int
	header http.Header
	body   []byte
	err    struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
}

func (a apiAnswer) param() string {
	if a.err.Param == nil {
		return ""
	}
	return *a.err.Param
}

func (a apiAnswer) code() string {
	if a.err.Code == nil {
		return ""
	}
	return *a.err.Code
}

// post sends body to the server's path and reads the answer whole.
func post(t *testing.T, root, path string, body any, header ...string) apiAnswer {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case []byte:
		data = b
	default:
		var err error
		data, err = json.Marshal(b)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(http.MethodPost, root+path, bytes.NewReader(data))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := apiAnswer{status: resp.StatusCode, header: resp.Header}
	a.body, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(a.body, &e) == nil && e.Error != nil {
		require.NoError(t, json.Unmarshal(e.Error, &a.err))
	}
	return a
}

// counting is a prompt SmolLM2 goes on from for hundreds of tokens.
const counting = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"

func userChat(n int, content string) []map[string]any {
	msgs := make([]map[string]any, n)
	for i := range msgs {
		msgs[i] = map[string]any{"role": "user", "content": content}
	}
	return msgs
}

// TestServeLimits: with every -limit-* flag set low, each field past its
// limit gets a 400 limit_exceeded naming the field (a body past -limit-body
// a 413); a body sent slower than -body-timeout gets a 408, and headers
// slower than -header-timeout lose the connection; -request-timeout stops
// a generation with a 504 request_timeout, as the error event of a stream.
// The access log holds a JSON record a request, with no prompt text.
func TestServeLimits(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	bin := serverBinary(t)
	accessLog := filepath.Join(t.TempDir(), "access.jsonl")
	_, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2",
		"-limit-body", "4KiB", "-limit-messages", "2", "-limit-tools", "1", "-limit-prompt-tokens", "60",
		"-limit-max-tokens", "4000", "-limit-stops", "2", "-limit-stop-bytes", "8",
		"-body-timeout", "1s", "-header-timeout", "1s", "-request-timeout", "1s", "-access-log", accessLog)
	root := strings.TrimSuffix(base, "/v1")
	tool := map[string]any{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object"}}}
	long := strings.Repeat("word ", 80)
	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		param      string
		message    string
	}{
		{"messages", "/v1/chat/completions", map[string]any{"messages": userChat(3, "hi")}, 400, "messages",
			"messages: 3 messages, more than this server takes (2)"},
		{"tools", "/v1/chat/completions", map[string]any{"messages": userChat(1, "hi"), "tools": []any{tool, tool}}, 400, "tools",
			"tools: 2 tools, more than this server takes (1)"},
		{"max_tokens", "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 4001}, 400, "max_tokens",
			"max_tokens: 4001, more than this server generates for a request (4000)"},
		{"max_completion_tokens", "/v1/chat/completions", map[string]any{"messages": userChat(1, "hi"), "max_completion_tokens": 5000}, 400,
			"max_completion_tokens", "max_completion_tokens: 5000, more than this server generates for a request (4000)"},
		{"prompt tokens", "/v1/completions", map[string]any{"prompt": long}, 400, "prompt", "more than this server takes in a prompt (60)"},
		{"chat prompt tokens", "/v1/chat/completions", map[string]any{"messages": userChat(1, long)}, 400, "messages",
			"more than this server takes in a prompt (60)"},
		{"stops", "/v1/completions", map[string]any{"prompt": "Hi", "stop": []string{"a", "b", "c"}}, 400, "stop",
			"stop: 3 strings, more than this server takes (2)"},
		{"stop bytes", "/v1/completions", map[string]any{"prompt": "Hi", "stop": "ninebytes"}, 400, "stop",
			"stop[0]: 9 bytes, longer than this server takes (8)"},
		{"body", "/v1/completions", map[string]any{"prompt": strings.Repeat("x", 5000)}, 413, "", "the body is larger than 4096 bytes"},
	} {
		a := post(t, root, tc.path, tc.body)
		assert.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.body)
		assert.Equal(t, tc.param, a.param(), tc.name)
		if tc.status == 400 {
			assert.Equal(t, "limit_exceeded", a.code(), tc.name)
		}
		assert.Contains(t, a.err.Message, tc.message, tc.name)
	}

	// A body slower than -body-timeout: 408 once the second is up.
	conn, err := net.Dial("tcp", strings.TrimPrefix(root, "http://"))
	require.NoError(t, err)
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	conn.Close()
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), "the body did not arrive within 1s")
	assert.Less(t, time.Since(start), 10*time.Second)

	// Headers slower than -header-timeout: the server closes the connection.
	conn, err = net.Dial("tcp", strings.TrimPrefix(root, "http://"))
	require.NoError(t, err)
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
	start = time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	_, err = io.ReadAll(conn)
	conn.Close()
	assert.NoError(t, err, "the server closed the connection (not the test's deadline)")
	assert.Less(t, time.Since(start), 10*time.Second)

	// A generation past -request-timeout: 504 whole, an error event streamed.
	a := post(t, root, "/v1/completions", map[string]any{"prompt": counting, "max_tokens": 4000})
	assert.Equal(t, http.StatusGatewayTimeout, a.status, "%s", a.body)
	assert.Equal(t, "request_timeout", a.code())
	assert.Contains(t, a.err.Message, "the request ran past the server's limit of 1s")
	a = post(t, root, "/v1/completions", map[string]any{"prompt": counting, "max_tokens": 4000, "stream": true})
	assert.Equal(t, http.StatusOK, a.status)
	events := strings.Split(strings.TrimSpace(string(a.body)), "\n\n")
	require.GreaterOrEqual(t, len(events), 2, "%s", a.body)
	assert.Equal(t, "data: [DONE]", events[len(events)-1])
	assert.Contains(t, events[len(events)-2], `"code":"request_timeout"`)

	// A short generation, logged with its id and tokens but not its text.
	a = post(t, root, "/v1/completions", map[string]any{"prompt": "The sky is", "max_tokens": 3})
	require.Equal(t, http.StatusOK, a.status, "%s\n%s", a.body, stderr.String())
	id := a.header.Get("X-Request-Id")
	require.NotEmpty(t, id)
	var records []map[string]any
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(accessLog)
		require.NoError(t, err)
		records = nil
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var r map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &r), "access record %q", line)
			records = append(records, r)
		}
		for _, r := range records {
			if r["id"] == id {
				return true
			}
		}
		return false
	}, 5*time.Second, 50*time.Millisecond, "the access log")
	var mine map[string]any
	codes := map[string]int{}
	for _, r := range records {
		if r["id"] == id {
			mine = r
		}
		if c, ok := r["error"].(string); ok {
			codes[c]++
		}
		assert.NotContains(t, r, "prompt", "no prompt text without -log-prompts")
	}
	require.NotNil(t, mine, "no record for %s in %v", id, records)
	assert.Equal(t, "request", mine["msg"])
	assert.Equal(t, "POST", mine["method"])
	assert.Equal(t, "/v1/completions", mine["path"])
	assert.Equal(t, 200.0, mine["status"])
	assert.Equal(t, 3.0, mine["completion_tokens"])
	assert.Equal(t, "length", mine["finish_reason"])
	assert.Greater(t, mine["prompt_tokens"], 0.0)
	assert.Greater(t, mine["ttft_ms"], 0.0)
	assert.Equal(t, 8, codes["limit_exceeded"], "the refused fields")
	assert.Equal(t, 1, codes["request_too_large"])
	assert.Equal(t, 3, codes["request_timeout"], "the slow body and the two generations past their time")
}

// TestServeSlowReader: a client that stops reading its stream is dropped
// after -write-timeout, and its row in the batch freed, while it still holds
// its connection open.
func TestServeSlowReader(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	bin := serverBinary(t)
	_, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2", "-write-timeout", "1s", "-send-buffer", "64KiB")
	root := strings.TrimSuffix(base, "/v1")
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		// a small receive window: the server's writes fill it at once
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(root, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	body, _ := json.Marshal(map[string]any{"prompt": counting, "max_tokens": 8000, "stream": true, "logprobs": 20})
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	health := func() (active, queued int) {
		resp, err := http.Get(root + "/health")
		require.NoError(t, err)
		defer resp.Body.Close()
		var h struct {
			Queue struct{ Active, Queued int }
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&h))
		return h.Queue.Active, h.Queue.Queued
	}
	require.Eventually(t, func() bool { a, _ := health(); return a == 1 }, 20*time.Second, 20*time.Millisecond, "the stream started")
	start := time.Now()
	require.Eventually(t, func() bool { a, q := health(); return a == 0 && q == 0 }, 60*time.Second, 100*time.Millisecond,
		"the unread stream still holds its row: %s", stderr.String())
	t.Logf("row freed %v after the stream started", time.Since(start))
	assert.Contains(t, stderr.String(), "dropped: the client did not take its data")
}
