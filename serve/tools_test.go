package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
)

// TestToolsReachTemplate: a chat request's tools are the template's tools
// variable, as transformers' apply_chat_template(tools=...) passes them.
// The tiny checkpoint's tokenizer spells bytes, so the prompt grows by the
// bytes the template writes for the tool.
func TestToolsReachTemplate(t *testing.T) {
	dir, _ := tinyChatWithTemplate(t, func(old string) any {
		return "{% for t in tools %}TOOL {{ t.function.name }};{% endfor %}" + old
	})
	srv := serveTiny(t, dir, archgen.LoadOptions{})

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
