package serve

import (
	"bufio"
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
	"github.com/archgen/archgen/internal/tinychat"
)

// TestServeHybrid: the server on models with recurrent layers (qwen3_next:
// state caches beside key and value caches; falcon_h1: a list of both in
// every layer; nemotron_h: fewer caches than layers; jamba: Mamba1's scan
// and experts; recurrent_gemma: states beside window caches;
// bailing_moe_linear: lightning states rotated from their own offsets)
// answers 16 concurrent chats each as the library answers it alone; a client that drops its stream frees its row; and a
// conversation's second turn reuses the first turn's cache. (The random
// models without attention answer every question alike, too alike to tell
// rows apart; generate/batch's TestBatchMatchesSolo holds them.)
func TestServeHybrid(t *testing.T) {
	for _, c := range []struct{ arch, name string }{
		{"qwen3_next", "base"},
		{"falcon_h1", "norm_after_gate"},
		{"nemotron_h", "pattern_moe"},
		{"jamba", "moe_periods"},
		{"recurrent_gemma", "attention_first_untied"},
		{"bailing_moe_linear", "softmax_groups"},
	} {
		t.Run(c.arch, func(t *testing.T) { serveHybrid(t, c.arch, c.name) })
	}
}

func serveHybrid(t *testing.T, arch, name string) {
	dir := filepath.Join(t.TempDir(), "tiny-hybrid")
	require.NoError(t, tinychat.WriteParity(dir, arch, name, nil, nil))
	m, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
	require.NoError(t, err)
	defer m.Free()
	const maxTokens = 12
	question := func(i int) string { return fmt.Sprintf("question number %d, about %s", i, strings.Repeat("x", i)) }
	want := make([]string, 16)
	for i := range want {
		res, err := m.Chat(context.Background(), []archgen.Message{{Role: "user", Content: question(i)}}, archgen.Options{MaxTokens: maxTokens}, nil)
		require.NoError(t, err)
		want[i] = res.Text
	}

	s, err := New(m, Options{ModelID: "tiny", MaxBatch: 16, PromptCacheBytes: 64 << 20})
	require.NoError(t, err)
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	type reply struct {
		text   string
		cached int
	}
	chat := func(msgs []map[string]string) reply {
		body, err := json.Marshal(map[string]any{"messages": msgs, "max_tokens": maxTokens})
		require.NoError(t, err)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var v struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		require.Len(t, v.Choices, 1)
		return reply{v.Choices[0].Message.Content, v.Usage.Details.Cached}
	}

	got := make([]string, len(want))
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = chat([]map[string]string{{"role": "user", "content": question(i)}}).text })
	}
	wg.Wait()
	distinct := map[string]bool{}
	for i := range got {
		assert.Equal(t, want[i], got[i], "chat %d: batched against alone", i)
		distinct[want[i]] = true
	}
	assert.Greater(t, len(distinct), 4, "the chats' answers are too alike to tell rows apart")
	assert.GreaterOrEqual(t, s.eng.Stats().MaxActive, 8, "the 16 chats were not batched")

	// A client that reads one chunk of its stream and goes.
	body := `{"messages": [{"role": "user", "content": "a long answer, please"}], "max_tokens": 200, "stream": true}`
	req, err := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first, "data: {"), "first line %q", first)
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for s.eng.Stats().Active > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.Zero(t, s.eng.Stats().Active, "the dropped stream still holds its row")

	// The next turn of a conversation starts from the first turn's cache.
	turn := []map[string]string{{"role": "user", "content": question(3)}}
	a := chat(turn)
	assert.Equal(t, want[3], a.text)
	turn = append(turn, map[string]string{"role": "assistant", "content": a.text}, map[string]string{"role": "user", "content": "and then?"})
	b := chat(turn)
	t.Logf("second turn: %d tokens cached; answers %q, %q", b.cached, a.text, b.text)
	first3, err := m.EncodeChat([]archgen.Message{{Role: "user", Content: question(3)}}, nil)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, b.cached, len(first3), "the second turn reused %d tokens; the first turn's prompt alone is %d", b.cached, len(first3))
	res, err := m.Chat(context.Background(), []archgen.Message{
		{Role: "user", Content: question(3)}, {Role: "assistant", Content: a.text}, {Role: "user", Content: "and then?"},
	}, archgen.Options{MaxTokens: maxTokens}, nil)
	require.NoError(t, err)
	assert.Equal(t, res.Text, b.text, "the second turn from the cache against alone")
}
