package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/internal/tinychat"
	"github.com/archgen/archgen/tokenizer/chat"
)

// TestTemplateErrors: a chat request to a model whose tokenizer has no chat
// template, and one whose template raises, get OpenAI-style errors naming
// messages (422 no_chat_template, 400 template_error), and the server goes on
// serving completions.
func TestTemplateErrors(t *testing.T) {
	for _, c := range []struct {
		name     string
		template any // nil: the key removed
		status   int
		code     string
		message  string
	}{
		{"no template", nil, http.StatusUnprocessableEntity, "no_chat_template",
			"messages: the model's tokenizer has no chat template (send a prompt to /v1/completions)"},
		{"template raises", "{{ raise_exception('only user messages, please') }}", http.StatusBadRequest, "template_error",
			"messages: the chat template failed: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := tinyChatWithTemplate(t, func(string) any { return c.template })
			srv := serveTiny(t, dir, archgen.LoadOptions{})

			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}`))
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, c.status, resp.StatusCode)
			var e struct {
				Error struct{ Message, Type, Param, Code string } `json:"error"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			assert.True(t, strings.HasPrefix(e.Error.Message, c.message), "message %q, want it to start %q", e.Error.Message, c.message)
			assert.Equal(t, "messages", e.Error.Param)
			assert.Equal(t, c.code, e.Error.Code)
			assert.Equal(t, "invalid_request_error", e.Error.Type)

			ok, err := http.Post(srv.URL+"/v1/completions", "application/json",
				strings.NewReader(`{"prompt": "hi", "max_tokens": 1}`))
			require.NoError(t, err)
			defer ok.Body.Close()
			assert.Equal(t, http.StatusOK, ok.StatusCode)
		})
	}
}

// hostileTemplate is tinychat's template with branches that a message's
// content opens: one that spins, one that recurses, one that allocates
// past any bound, one that panics the template engine.
const hostileTemplate = `{% macro deeper(n) %}{{ deeper(n + 1) }}{% endmacro %}` +
	`{% for m in messages %}{% if m.content == 'spin' %}{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}` +
	`{% elif m.content == 'recurse' %}{{ deeper(0) }}{% elif m.content == 'grow' %}{{ 'a' * 2000000000 }}` +
	`{% elif m.content == 'panic' %}{{ 'a' * -1 }}{% endif %}{% endfor %}` + tinychat.Template

// TestTemplateBounds: a chat template from the model's files that spins,
// recurses, allocates or panics on some message gets 422 template_bounds
// naming the template file and the bound, within the time bound, and the
// server goes on answering chats.
func TestTemplateBounds(t *testing.T) {
	dir, cfgPath := tinyChatWithTemplate(t, func(string) any { return hostileTemplate })
	bounds := chat.Bounds{Time: time.Second, Memory: 256 << 20}
	srv := serveTiny(t, dir, archgen.LoadOptions{TemplateBounds: bounds})

	post := func(content string) (int, string, string) {
		start := time.Now()
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"messages": [{"role": "user", "content": %q}], "max_tokens": 1}`, content)))
		require.NoError(t, err)
		defer resp.Body.Close()
		assert.Less(t, time.Since(start), bounds.Time+10*time.Second, content)
		var e struct {
			Error struct{ Message, Param, Code string } `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		if resp.StatusCode != http.StatusOK {
			assert.Equal(t, "messages", e.Error.Param)
		}
		return resp.StatusCode, e.Error.Code, e.Error.Message
	}
	for _, c := range []struct{ content, bound string }{
		{"spin", "time bound of 1s"}, {"recurse", "stack bound"}, {"grow", "memory bound of 256 MiB"}, {"panic", "negative Repeat count"},
	} {
		status, code, msg := post(c.content)
		assert.Equal(t, http.StatusUnprocessableEntity, status, c.content)
		assert.Equal(t, "template_bounds", code, c.content)
		assert.Contains(t, msg, cfgPath, c.content)
		assert.Contains(t, msg, c.bound, c.content)
		status, _, msg = post("hi")
		assert.Equal(t, http.StatusOK, status, "a plain chat after %q: %s", c.content, msg)
	}
}

// tinyChatWithTemplate writes the tiny chat checkpoint with the chat
// template edit returns for tinychat's (nil: the key removed), and returns
// its folder and its tokenizer_config.json.
func tinyChatWithTemplate(t *testing.T, edit func(string) any) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-chat")
	require.NoError(t, tinychat.Write(dir, nil, nil))
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(cfgPath)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(data, &cfg))
	if v := edit(cfg["chat_template"].(string)); v == nil {
		delete(cfg, "chat_template")
	} else {
		cfg["chat_template"] = v
	}
	data, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfgPath, data, 0o644))
	return dir, cfgPath
}

// serveTiny loads a checkpoint and serves it for the rest of the test.
func serveTiny(t *testing.T, dir string, opts archgen.LoadOptions) *httptest.Server {
	t.Helper()
	m, err := archgen.Load(context.Background(), dir, opts)
	require.NoError(t, err)
	t.Cleanup(m.Free)
	s, err := New(m, Options{ModelID: "tiny", MaxBatch: 2})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// TestTopKBeyondVocab: a top_k of the vocabulary's size or more is refused
// naming top_k (the sampler would refuse it without naming the field).
func TestTopKBeyondVocab(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-chat")
	require.NoError(t, tinychat.Write(dir, nil, nil))
	m, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
	require.NoError(t, err)
	defer m.Free()
	s, err := New(m, Options{ModelID: "tiny", MaxBatch: 2})
	require.NoError(t, err)
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	vocab := m.Net.Info().VocabSize
	for k, status := range map[int]int{vocab - 1: http.StatusOK, vocab: http.StatusBadRequest} {
		body := fmt.Sprintf(`{"prompt": "hi", "max_tokens": 1, "top_k": %d}`, k)
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		var e struct {
			Error struct{ Message, Param, Code string } `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, "top_k %d", k)
		if status != http.StatusOK {
			assert.Equal(t, fmt.Sprintf("top_k: %d, want fewer than the vocabulary's %d tokens", k, vocab), e.Error.Message)
			assert.Equal(t, "top_k", e.Error.Param)
			assert.Equal(t, "invalid_value", e.Error.Code)
		}
	}
}
