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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/internal/tinychat"
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
			dir := filepath.Join(t.TempDir(), "tiny-chat")
			require.NoError(t, tinychat.Write(dir, nil, nil))
			cfgPath := filepath.Join(dir, "tokenizer_config.json")
			data, err := os.ReadFile(cfgPath)
			require.NoError(t, err)
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(data, &cfg))
			if c.template == nil {
				delete(cfg, "chat_template")
			} else {
				cfg["chat_template"] = c.template
			}
			data, err = json.Marshal(cfg)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(cfgPath, data, 0o644))

			m, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
			require.NoError(t, err)
			defer m.Free()
			s, err := New(m, Options{ModelID: "tiny", MaxBatch: 2})
			require.NoError(t, err)
			defer s.Close()
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()

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
