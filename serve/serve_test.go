package serve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPanicBecomesError: a handler that panics answers its request with a
// 500 error body, and the next request is served.
func TestPanicBecomesError(t *testing.T) {
	s := &Server{}
	calls := 0
	h := s.recoverer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			var m map[string]int
			m["x"] = 1 // a nil map: panics
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	var body struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "internal error: assignment to entry in nil map", body.Error.Message)
	assert.Equal(t, "server_error", body.Error.Type)
	assert.Equal(t, "internal_error", body.Error.Code)
	resp2, err := http.Get(srv.URL)
	require.NoError(t, err)
	resp2.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp2.StatusCode)
}
