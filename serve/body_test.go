package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBodyTooLarge: a body over 16 MiB is refused with a 413 error body
// once that much has been read, not read whole.
func TestBodyTooLarge(t *testing.T) {
	s := &Server{opts: Options{Limits: DefaultLimits}}
	body := append([]byte(`{"prompt": "`), bytes.Repeat([]byte("x"), int(DefaultLimits.BodyBytes)+1)...)
	body = append(body, `"}`...)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req completionRequest
		e := s.decode(w, r, &req)
		require.NotNil(t, e)
		writeError(w, e)
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", bytes.NewReader(body)))
	assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	var got struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	assert.Equal(t, "request_too_large", got.Error.Code)
	assert.Equal(t, "invalid_request_error", got.Error.Type)
	assert.Equal(t, "the body is larger than 16777216 bytes", got.Error.Message)
}

// TestShuttingDown: once SIGTERM has stopped the server taking requests, a
// request that still reaches a handler gets a 503 error body.
func TestShuttingDown(t *testing.T) {
	s := &Server{}
	s.stopping.Store(true)
	rec := httptest.NewRecorder()
	s.run(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", nil), &job{})
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	var got struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	assert.Equal(t, "shutting_down", got.Error.Code)
	assert.Equal(t, "server_error", got.Error.Type)
	assert.Equal(t, "the server is shutting down", got.Error.Message)
}
