package main

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeCORS: with -cors-origins, a browser's preflight from an allowed
// origin gets 204 with the methods and the headers it asked for (before
// any key is checked: browsers send none with it), and the answers to
// that origin carry Access-Control-Allow-Origin; another origin's
// preflight gets 403 origin_not_allowed and its answers no CORS header.
func TestServeCORS(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	bin := serverBinary(t)
	_, base, _ := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2",
		"-cors-origins", "https://ui.example, http://localhost:3000", "-api-key", "sk-cors", "-access-log", "off")
	root := strings.TrimSuffix(base, "/v1")
	do := func(method, path, origin string, header ...string) *http.Response {
		req, err := http.NewRequest(method, root+path, nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	asked := "authorization, content-type, x-stainless-os"
	for _, origin := range []string{"https://ui.example", "http://localhost:3000"} {
		resp := do(http.MethodOptions, "/v1/chat/completions", origin,
			"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", asked)
		assert.Equal(t, http.StatusNoContent, resp.StatusCode, origin)
		assert.Equal(t, origin, resp.Header.Get("Access-Control-Allow-Origin"))
		assert.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "POST")
		assert.Equal(t, asked, resp.Header.Get("Access-Control-Allow-Headers"))
		resp = do(http.MethodGet, "/v1/models", origin, "Authorization", "Bearer sk-cors")
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, origin, resp.Header.Get("Access-Control-Allow-Origin"))
		assert.Contains(t, resp.Header.Values("Vary"), "Origin")
		// a browser reads the 401 too, to tell its user about the key
		resp = do(http.MethodGet, "/v1/models", origin)
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		assert.Equal(t, origin, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	resp := do(http.MethodOptions, "/v1/chat/completions", "https://evil.example", "Access-Control-Request-Method", "POST")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	resp = do(http.MethodGet, "/v1/models", "https://evil.example", "Authorization", "Bearer sk-cors")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the server answers; the browser withholds it")
	assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
}
