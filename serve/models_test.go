package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/internal/tinychat"
)

// TestModelNames: /v1/models lists the id and the aliases; a request naming
// either gets that name back, one naming another model is served under the
// id, and StrictModel refuses it naming the field.
func TestModelNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-chat")
	require.NoError(t, tinychat.Write(dir, nil, nil))
	m, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
	require.NoError(t, err)
	defer m.Free()
	start := func(strict bool) *httptest.Server {
		s, err := New(m, Options{ModelID: "tiny", Aliases: []string{"tiny-latest", "small"}, StrictModel: strict, MaxBatch: 2})
		require.NoError(t, err)
		t.Cleanup(s.Close)
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		return srv
	}
	post := func(srv *httptest.Server, model string) (int, map[string]any) {
		body := `{"model": "` + model + `", "prompt": "hi", "max_tokens": 1}`
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}

	srv := start(false)
	resp, err := http.Get(srv.URL + "/v1/models")
	require.NoError(t, err)
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	resp.Body.Close()
	var ids []string
	for _, d := range list.Data {
		ids = append(ids, d.ID)
	}
	assert.Equal(t, []string{"tiny", "tiny-latest", "small"}, ids)
	for name, want := range map[string]string{"tiny": "tiny", "small": "small", "gpt-4o-mini": "tiny", "": "tiny"} {
		status, out := post(srv, name)
		assert.Equal(t, http.StatusOK, status, name)
		assert.Equal(t, want, out["model"], name)
	}

	strict := start(true)
	status, out := post(strict, "small")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "small", out["model"])
	status, out = post(strict, "no-such-model")
	assert.Equal(t, http.StatusNotFound, status)
	e := out["error"].(map[string]any)
	assert.Equal(t, "model", e["param"])
	assert.Equal(t, "model_not_found", e["code"])
	assert.Equal(t, `model "no-such-model": this server runs "tiny" (GET /v1/models)`, e["message"])
}
