package serve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
)

// TestResponsesAPI: POST /v1/responses answers with the text the chat API
// gives for the same conversation, streamed as the Responses API's events
// too; previous_response_id continues a kept conversation (the prompt is the
// chat of both turns); GET and DELETE find kept responses; bad input items
// are refused naming them.
func TestResponsesAPI(t *testing.T) {
	dir, _ := tinyChatWithTemplate(t, func(old string) any { return old })
	srv := serveTiny(t, dir, archgen.LoadOptions{})
	do := func(method, path, body string) (int, map[string]any) {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	chatText := func(body string) (string, float64) {
		status, out := do("POST", "/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, status, "%v", out)
		return out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string),
			out["usage"].(map[string]any)["prompt_tokens"].(float64)
	}
	outputText := func(r map[string]any) string {
		var b strings.Builder
		for _, it := range r["output"].([]any) {
			item := it.(map[string]any)
			if item["type"] == "message" {
				b.WriteString(item["content"].([]any)[0].(map[string]any)["text"].(string))
			}
		}
		return b.String()
	}

	want, prompt := chatText(`{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 5}`)
	status, r := do("POST", "/v1/responses", `{"model": "gpt-5", "instructions": "be brief", "input": "hi", "max_output_tokens": 5}`)
	require.Equal(t, http.StatusOK, status, "%v", r)
	assert.Equal(t, "response", r["object"])
	assert.Equal(t, "incomplete", r["status"])
	assert.Equal(t, map[string]any{"reason": "max_output_tokens"}, r["incomplete_details"])
	assert.Equal(t, want, outputText(r))
	assert.Equal(t, prompt, r["usage"].(map[string]any)["input_tokens"])
	id := r["id"].(string)
	assert.True(t, strings.HasPrefix(id, "resp_"), id)

	// The second turn: the kept conversation, the new input, the same
	// instructions given again.
	want2, prompt2 := chatText(`{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
		{"role": "assistant", "content": ` + quote(want) + `}, {"role": "user", "content": "more"}], "max_tokens": 3}`)
	status, r2 := do("POST", "/v1/responses", `{"instructions": "be brief", "previous_response_id": "`+id+`",
		"input": [{"role": "user", "content": [{"type": "input_text", "text": "more"}]}], "max_output_tokens": 3}`)
	require.Equal(t, http.StatusOK, status, "%v", r2)
	assert.Equal(t, want2, outputText(r2))
	assert.Equal(t, prompt2, r2["usage"].(map[string]any)["input_tokens"])
	assert.Equal(t, id, r2["previous_response_id"])

	status, got := do("GET", "/v1/responses/"+id, "")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, id, got["id"])
	status, _ = do("DELETE", "/v1/responses/"+id, "")
	assert.Equal(t, http.StatusOK, status)
	status, got = do("GET", "/v1/responses/"+id, "")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "response_not_found", got["error"].(map[string]any)["code"])

	// Streamed: the events in order, the text the whole response had.
	req, err := http.NewRequest("POST", srv.URL+"/v1/responses", strings.NewReader(
		`{"instructions": "be brief", "input": "hi", "max_output_tokens": 5, "stream": true, "store": false}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var kinds []string
	var text strings.Builder
	seq := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		assert.Equal(t, float64(seq), ev["sequence_number"])
		seq++
		kind := ev["type"].(string)
		if len(kinds) == 0 || kinds[len(kinds)-1] != kind {
			kinds = append(kinds, kind)
		}
		if kind == "response.output_text.delta" {
			text.WriteString(ev["delta"].(string))
		}
	}
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.incomplete"}, kinds)
	assert.Equal(t, want, text.String())

	for _, c := range []struct {
		body, param string
		status      int
	}{
		{`{"input": []}`, "input", 400},
		{`{}`, "input", 400},
		{`{"input": [{"type": "computer_call"}]}`, "input[0].type", 422},
		{`{"input": [{"role": "tool", "content": "x"}]}`, "input[0].role", 400},
		{`{"input": "hi", "previous_response_id": "resp_none"}`, "previous_response_id", 400},
		{`{"input": "hi", "tools": [{"type": "web_search"}]}`, "tools[0].type", 422},
		{`{"input": "hi", "max_output_tokens": 0}`, "max_output_tokens", 400},
	} {
		status, out := do("POST", "/v1/responses", c.body)
		assert.Equal(t, c.status, status, c.body)
		e, _ := out["error"].(map[string]any)
		require.NotNil(t, e, c.body)
		assert.Equal(t, c.param, e["param"], c.body)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
