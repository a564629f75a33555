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
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<20)
			last := ""
			for sc.Scan() {
				line := sc.Text()
				if line == "" {
					continue
				}
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					t.Fatalf("%s: a stream line %q is not an event", body, line)
				}
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
