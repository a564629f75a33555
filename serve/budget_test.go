package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/generate/batch"
	"github.com/archgen/archgen/internal/tinychat"
	"github.com/archgen/archgen/runtime/kv"
)

// TestKVBudgetAdmission: a server whose KV budget holds two requests at
// their longest answers eight concurrent chats, all 200, with no more than
// two decoding at once; a request that alone needs more than the budget
// gets a 400 naming max_tokens and the tokens that fit; with MaxQueue
// requests waiting, one more gets 429 server_busy with Retry-After.
func TestKVBudgetAdmission(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-chat")
	require.NoError(t, tinychat.Write(dir, nil, nil))
	m, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
	require.NoError(t, err)
	defer m.Free()
	probe, err := New(m, Options{ModelID: "tiny", KVBudget: 1 << 40})
	require.NoError(t, err)
	per := probe.eng.Stats().KVPerPosition
	probe.Close()
	require.Positive(t, per)

	// two rows at their longest: the longest prompt, 20 tokens for a row
	// that joins as the other ends (its prompt padded to the other's
	// length) and 20 of its own, and a growth step of room past them
	longest := 0
	for i := range 8 {
		ids, err := m.EncodeChat([]archgen.Message{{Role: "user", Content: fmt.Sprintf("question %d", i)}}, nil)
		require.NoError(t, err)
		longest = max(longest, len(ids))
	}
	row := int64(longest + 2*20 + kv.Step - 1)
	s, err := New(m, Options{ModelID: "tiny", MaxBatch: 8, KVBudget: 2 * row * per, MaxQueue: 1})
	require.NoError(t, err)
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	chat := func(content string, maxTokens int) (int, map[string]any, http.Header) {
		body := fmt.Sprintf(`{"messages": [{"role": "user", "content": %q}], "max_tokens": %d}`, content, maxTokens)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		return resp.StatusCode, v, resp.Header
	}
	// two clients at a time, eight requests in all
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	sem := make(chan struct{}, 2)
	for i := range statuses {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			statuses[i], _, _ = chat(fmt.Sprintf("question %d", i), 20)
		})
	}
	wg.Wait()
	for i, st := range statuses {
		assert.Equal(t, http.StatusOK, st, "request %d", i)
	}
	assert.LessOrEqual(t, s.eng.Stats().MaxActive, 2)

	status, v, _ := chat("hi", 5000)
	assert.Equal(t, http.StatusBadRequest, status)
	e := v["error"].(map[string]any)
	assert.Equal(t, "max_tokens", e["param"])
	assert.Equal(t, "limit_exceeded", e["code"])
	assert.Contains(t, e["message"], "more than this server's budget")
	assert.Contains(t, e["message"], "ask for at most")

	// One long generation runs (the budget holds it alone) and one like
	// it waits: the queue is full.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var chans []<-chan batch.Event
	for range 2 {
		ch, err := s.eng.Submit(ctx, batch.Request{Prompt: []int32{1, 2, 3}, MaxTokens: int(2*row) - 3 - (kv.Step - 1)})
		require.NoError(t, err)
		chans = append(chans, ch)
	}
	require.Eventually(t, func() bool { st := s.eng.Stats(); return st.Active == 1 && st.Queued == 1 },
		5*time.Second, time.Millisecond, "one runs, one waits")
	status, v, h := chat("hi", 2)
	assert.Equal(t, http.StatusTooManyRequests, status, "%v", v)
	assert.Equal(t, "server_busy", v["error"].(map[string]any)["code"])
	assert.Equal(t, "the server is busy: its queue of 1 is full; retry later", v["error"].(map[string]any)["message"])
	assert.Equal(t, "1", h.Get("Retry-After"))
	cancel()
	for _, ch := range chans {
		for range ch {
		}
	}
}
