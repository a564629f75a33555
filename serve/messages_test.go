package serve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
)

// TestMessagesAPI: POST /v1/messages answers the Messages API's message
// object with the text the chat API gives for the same conversation, and
// streams the same text as message_start, one text block's deltas,
// message_delta and message_stop; count_tokens gives the prompt's tokens.
func TestMessagesAPI(t *testing.T) {
	dir, _ := tinyChatWithTemplate(t, func(old string) any { return old })
	srv := serveTiny(t, dir, archgen.LoadOptions{})
	post := func(path, body string) (*http.Response, map[string]any) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			return resp, nil
		}
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp, out
	}

	_, ref := post("/v1/chat/completions", `{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 6}`)
	want := ref["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	refUsage := ref["usage"].(map[string]any)

	body := `{"model": "claude-x", "system": [{"type": "text", "text": "be brief"}], "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 6}`
	resp, msg := post("/v1/messages", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%v", msg)
	assert.Equal(t, "message", msg["type"])
	assert.Equal(t, "assistant", msg["role"])
	assert.Equal(t, "tiny", msg["model"])
	assert.True(t, strings.HasPrefix(msg["id"].(string), "msg_"))
	content := msg["content"].([]any)
	require.Len(t, content, 1)
	assert.Equal(t, map[string]any{"type": "text", "text": want}, content[0])
	assert.Equal(t, "max_tokens", msg["stop_reason"])
	usage := msg["usage"].(map[string]any)
	assert.Equal(t, refUsage["prompt_tokens"], usage["input_tokens"])
	assert.Equal(t, float64(6), usage["output_tokens"])

	resp, _ = post("/v1/messages", strings.Replace(body, `"max_tokens": 6`, `"max_tokens": 6, "stream": true`, 1))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	defer resp.Body.Close()
	var names []string
	var text strings.Builder
	var stop any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			if len(names) == 0 || names[len(names)-1] != name {
				names = append(names, name)
			}
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		switch ev["type"] {
		case "content_block_delta":
			text.WriteString(ev["delta"].(map[string]any)["text"].(string))
		case "message_delta":
			stop = ev["delta"].(map[string]any)["stop_reason"]
		}
	}
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names)
	assert.Equal(t, want, text.String())
	assert.Equal(t, "max_tokens", stop)

	resp, count := post("/v1/messages/count_tokens", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, refUsage["prompt_tokens"], count["input_tokens"])

	for _, c := range []struct {
		body, param string
		status      int
	}{
		{`{"messages": [], "max_tokens": 4}`, "messages", 400},
		{`{"messages": [{"role": "system", "content": "x"}], "max_tokens": 4}`, "messages[0].role", 400},
		{`{"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}], "max_tokens": 4}`, "messages[0].content[0].type", 422},
		{`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stop_sequences": "x"}`, "stop_sequences", 400},
		{`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "tools": [{"description": "no name"}]}`, "tools[0].name", 400},
	} {
		resp, out := post("/v1/messages", c.body)
		assert.Equal(t, c.status, resp.StatusCode, c.body)
		assert.Equal(t, "error", out["type"], c.body)
		e := out["error"].(map[string]any)
		assert.Equal(t, c.param, e["param"], c.body)
		assert.Equal(t, "invalid_request_error", e["type"], c.body)
		assert.NotEmpty(t, e["message"], c.body)
	}
}

// TestMessagesAPIKey: with API keys set, the Messages API's x-api-key
// header is taken as the key; a wrong one gets a 401 in that API's error
// shape.
func TestMessagesAPIKey(t *testing.T) {
	dir, _ := tinyChatWithTemplate(t, func(old string) any { return old })
	m, err := archgen.Load(t.Context(), dir, archgen.LoadOptions{})
	require.NoError(t, err)
	defer m.Free()
	s, err := New(m, Options{ModelID: "tiny", MaxBatch: 2, APIKeys: []string{"sk-right"}})
	require.NoError(t, err)
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for key, status := range map[string]int{"sk-right": http.StatusOK, "sk-wrong": http.StatusUnauthorized} {
		req, err := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}`))
		require.NoError(t, err)
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, key)
		if status != http.StatusOK {
			assert.Equal(t, "error", out["type"])
			assert.Equal(t, "authentication_error", out["error"].(map[string]any)["type"])
		}
	}
}
