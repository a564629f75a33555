package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/internal/tinychat"
)

// fuzzServer is one server on the tiny chat model for every fuzz input of
// a process, bounded so that an input that asks for much gets little:
// max_tokens up to 4, a context of 64 tokens.
var fuzzServer struct {
	once sync.Once
	h    http.Handler
	err  error
}

func fuzzHandler(t testing.TB) http.Handler {
	fuzzServer.once.Do(func() {
		dir := filepath.Join(t.TempDir(), "tiny-chat")
		if fuzzServer.err = tinychat.Write(dir, nil, nil); fuzzServer.err != nil {
			return
		}
		m, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
		if err != nil {
			fuzzServer.err = err
			return
		}
		s, err := New(m, Options{ModelID: "tiny", MaxBatch: 4, ContextLength: 64, DefaultMaxTokens: 2,
			Limits: Limits{MaxTokens: 4, Messages: 64}})
		if err != nil {
			fuzzServer.err = err
			return
		}
		fuzzServer.h = s.Handler()
	})
	if fuzzServer.err != nil {
		t.Fatal(fuzzServer.err)
	}
	return fuzzServer.h
}

// FuzzRequests: any body to either generation endpoint gets an answer the
// API defines: 200 with a chat or completion object (or server-sent events
// of them ending in [DONE]), or a 4xx with an OpenAI-style error naming a
// message, a type and a code; never a 500 (a panic becomes one) nor
// another body.
func FuzzRequests(f *testing.F) {
	for _, seed := range []string{
		`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`,
		`{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "stream": true, "stream_options": {"include_usage": true}}`,
		`{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 3, "temperature": 0.7, "top_p": 0.9, "seed": 5}`,
		`{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "stop": ["a", "b"]}`,
		`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}, {"role": "tool", "content": "x", "tool_call_id": "1"}]}`,
		`{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}], "tool_choice": "required", "max_tokens": 4}`,
		`{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "items": {"enum": [1, "a"]}}}}, "stream": true}`,
		`{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}, "reasoning_effort": "low"}`,
		`{"prompt": "hi", "grammar": "root ::= [a-c]+", "max_tokens": 3}`,
		`{"prompt": "hi", "guided_choice": ["x", "yz"], "guided_regex": "a"}`,
		`{"messages": [], "n": 2}`,
		`{"messages": [{"role": ""}], "max_tokens": -1}`,
		`{"messages": [{"role": "user", "content": {"a": 1}}], "top_k": 1e9}`,
		`{"prompt": "hi", "max_tokens": 3, "logprobs": 2}`,
		`{"prompt": [1, 2, 3], "stream": true}`,
		`{"prompt": ["a", "b"]}`,
		`{"prompt": [99999999]}`,
		`{"prompt": "", "stop": 5}`,
		`{"prompt": "x", "max_completion_tokens": 100, "min_p": 2, "repetition_penalty": 0}`,
		`[1, 2]`,
		`{"prompt": "x"`,
		`null`,
	} {
		f.Add(strings.Contains(seed, "messages"), []byte(seed))
	}
	f.Fuzz(func(t *testing.T, chat bool, body []byte) {
		h := fuzzHandler(t)
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		out := rec.Body.Bytes()
		switch {
		case rec.Code == http.StatusOK && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream"):
			last := ""
			for _, data := range streamData(t, body, out) {
				if data != "[DONE]" && !json.Valid([]byte(data)) {
					t.Fatalf("%s: event %q is not JSON", body, data)
				}
				last = data
			}
			if last != "[DONE]" {
				t.Fatalf("%s: the stream ends with %q, not [DONE]", body, last)
			}
		case rec.Code == http.StatusOK:
			var v struct {
				Object  string `json:"object"`
				Choices []any  `json:"choices"`
			}
			if err := json.Unmarshal(out, &v); err != nil || len(v.Choices) != 1 || v.Object == "" {
				t.Fatalf("%s: 200 with %q", body, out)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var e struct {
				Error *struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(out, &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
				t.Fatalf("%s: %d with %q, not an OpenAI-style error", body, rec.Code, out)
			}
		default:
			t.Fatalf("%s: status %d: %s", body, rec.Code, out)
		}
	})
}

// FuzzAPIRequests: any body to the Messages API (anthropic true) or the
// Responses API gets an answer that API defines: 200 with a message or
// response object (or its named events, ending in message_stop or a
// response's last event), or a 4xx in the API's error shape with a
// message; never a 500 nor another body.
func FuzzAPIRequests(f *testing.F) {
	for _, seed := range []string{
		`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`,
		`{"system": [{"type": "text", "text": "be brief"}], "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "stream": true, "max_tokens": 3}`,
		`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}, {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}]}]}], "max_tokens": 2}`,
		`{"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}, "max_tokens": 4}`,
		`{"messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "enabled", "budget_tokens": 10}, "stop_sequences": ["a"], "temperature": 0.5, "top_k": 3}`,
		`{"messages": [{"role": "system", "content": 1}], "max_tokens": "x"}`,
		`{"input": "hi", "max_output_tokens": 2}`,
		`{"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "instructions": "be brief", "stream": true}`,
		`{"input": [{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c", "output": "1"}], "tools": [{"type": "function", "name": "f"}]}`,
		`{"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}, "max_output_tokens": 4}`,
		`{"input": "hi", "previous_response_id": "resp_x", "tool_choice": "required"}`,
		`{"input": [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "t"}]}], "top_logprobs": 2}`,
		`[1]`,
		`{"input": `,
	} {
		f.Add(strings.Contains(seed, "messages"), []byte(seed))
	}
	f.Fuzz(func(t *testing.T, anthropic bool, body []byte) {
		h := fuzzHandler(t)
		path := "/v1/responses"
		if anthropic {
			path = "/v1/messages"
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		out := rec.Body.Bytes()
		switch {
		case rec.Code == http.StatusOK && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream"):
			last := ""
			for _, data := range streamData(t, body, out) {
				var ev struct {
					Type string `json:"type"`
				}
				if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type == "" {
					t.Fatalf("%s: event %q is not a typed JSON object", body, data)
				}
				last = ev.Type
			}
			ends := map[string]bool{"message_stop": anthropic, "response.completed": !anthropic, "response.incomplete": !anthropic, "response.failed": !anthropic}
			if !ends[last] {
				t.Fatalf("%s: the stream ends with %q", body, last)
			}
		case rec.Code == http.StatusOK:
			var v struct {
				Type, Object string
				Content      []any `json:"content"`
				Output       []any `json:"output"`
			}
			if err := json.Unmarshal(out, &v); err != nil || (anthropic && v.Type != "message") || (!anthropic && v.Object != "response") {
				t.Fatalf("%s: 200 with %q", body, out)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var e struct {
				Type  string `json:"type"`
				Error *struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(out, &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" || (anthropic && e.Type != "error") {
				t.Fatalf("%s: %d with %q, not the API's error", body, rec.Code, out)
			}
		default:
			t.Fatalf("%s: status %d: %s", body, rec.Code, out)
		}
	})
}

// streamData is the data of each server-sent event in out, failing t on a
// line that is neither data, an event name nor blank.
func streamData(t *testing.T, body, out []byte) []string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	var datas []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "event: ") {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("%s: a stream line %q is not an event", body, line)
		}
		datas = append(datas, data)
	}
	return datas
}
