package serve

import (
	"context"
	"encoding/json"
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

// TestToolsReachTemplate: a chat request's tools are the template's tools
// variable, as transformers' apply_chat_template(tools=...) passes them.
// The tiny checkpoint's tokenizer spells bytes, so the prompt grows by the
// bytes the template writes for the tool.
func TestToolsReachTemplate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-chat")
	require.NoError(t, tinychat.Write(dir, nil, nil))
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(cfgPath)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(data, &cfg))
	cfg["chat_template"] = "{% for t in tools %}TOOL {{ t.function.name }};{% endfor %}" + cfg["chat_template"].(string)
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

	promptTokens := func(body string) int {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return out.Usage.PromptTokens
	}
	plain := promptTokens(`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}`)
	withTools := promptTokens(`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
		"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}`)
	assert.Equal(t, plain+len("TOOL get_weather;"), withTools)

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages": [{"role": "user", "content": "hi"}], "tools": ["get_weather"]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var e struct {
		Error struct{ Message, Param, Code string } `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.Equal(t, "tools[0]: want an object", e.Error.Message)
	assert.Equal(t, "tools[0]", e.Error.Param)
	assert.Equal(t, "invalid_type", e.Error.Code)
}
