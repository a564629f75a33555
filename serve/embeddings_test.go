package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
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

// embedServer serves the tiny chat checkpoint with opts and returns the
// model beside the server.
func embedServer(t *testing.T, opts Options) (*archgen.Model, *httptest.Server) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-chat")
	require.NoError(t, tinychat.Write(dir, nil, nil))
	m, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(m.Free)
	if opts.ModelID == "" {
		opts.ModelID = "tiny"
	}
	opts.MaxBatch = 2
	s, err := New(m, opts)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return m, srv
}

// embeddingsReply is the body of a successful /v1/embeddings answer.
type embeddingsReply struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// postEmbeddings posts body and returns the status and the raw answer.
func postEmbeddings(t *testing.T, srv *httptest.Server, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(srv.URL+"/v1/embeddings", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out json.RawMessage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// vectors reads the embeddings of a reply, floats or base64.
func (r embeddingsReply) vectors(t *testing.T) [][]float32 {
	t.Helper()
	out := make([][]float32, len(r.Data))
	for i, d := range r.Data {
		assert.Equal(t, "embedding", d.Object)
		assert.Equal(t, i, d.Index)
		var b64 string
		if json.Unmarshal(d.Embedding, &b64) == nil {
			b, err := base64.StdEncoding.DecodeString(b64)
			require.NoError(t, err)
			require.Zero(t, len(b)%4)
			for k := 0; k < len(b); k += 4 {
				out[i] = append(out[i], math.Float32frombits(binary.LittleEndian.Uint32(b[k:])))
			}
			continue
		}
		require.NoError(t, json.Unmarshal(d.Embedding, &out[i]))
	}
	return out
}

// TestEmbeddings: every form of input gets the vectors archgen.Embed (or
// EmbedTokens) gives, to the bit, as floats and as base64; dimensions
// truncate and renormalize; usage counts the inputs' tokens; the model
// name comes back; Options.EmbedPooling picks the pooling.
func TestEmbeddings(t *testing.T) {
	m, srv := embedServer(t, Options{Aliases: []string{"tiny-embed"}})
	ctx := context.Background()
	texts := []string{"Hello, world!", "The quick brown fox.", "a"}
	want, err := m.Embed(ctx, texts, archgen.EmbedOptions{})
	require.NoError(t, err)
	tokens := 0
	for _, s := range texts {
		tokens += len(m.Tokenizer.Encode(s, true))
	}
	post := func(body string) embeddingsReply {
		t.Helper()
		status, raw := postEmbeddings(t, srv, body)
		require.Equal(t, http.StatusOK, status, "%s", raw)
		var r embeddingsReply
		require.NoError(t, json.Unmarshal(raw, &r))
		assert.Equal(t, "list", r.Object)
		return r
	}

	// one input runs alone: its vector is Embed's of it alone (in a list,
	// inputs run together and may round in their last places otherwise)
	alone, err := m.Embed(ctx, texts[:1], archgen.EmbedOptions{})
	require.NoError(t, err)
	r := post(`{"input": "Hello, world!", "model": "tiny-embed"}`)
	assert.Equal(t, "tiny-embed", r.Model)
	assert.Equal(t, alone, r.vectors(t))
	assert.Equal(t, len(m.Tokenizer.Encode(texts[0], true)), r.Usage.PromptTokens)

	body, _ := json.Marshal(map[string]any{"input": texts, "model": "text-embedding-3-small", "user": "someone"})
	r = post(string(body))
	assert.Equal(t, "tiny", r.Model)
	got := r.vectors(t)
	assert.Equal(t, want, got)
	assert.Equal(t, tokens, r.Usage.PromptTokens)
	assert.Equal(t, tokens, r.Usage.TotalTokens)
	for _, v := range got {
		require.Len(t, v, m.Net.Info().Hidden)
		var ss float64
		for _, x := range v {
			ss += float64(x) * float64(x)
		}
		assert.InDelta(t, 1, ss, 1e-5)
	}

	body, _ = json.Marshal(map[string]any{"input": texts, "encoding_format": "base64"})
	assert.Equal(t, want, post(string(body)).vectors(t))

	cut, err := m.Embed(ctx, texts, archgen.EmbedOptions{Dimensions: 8})
	require.NoError(t, err)
	body, _ = json.Marshal(map[string]any{"input": texts, "dimensions": 8, "encoding_format": "float"})
	assert.Equal(t, cut, post(string(body)).vectors(t))

	ids := [][]int32{{5, 17, 42}, {tinychat.BOS, 72, 105}}
	wantIDs, err := m.EmbedTokens(ctx, ids, archgen.EmbedOptions{})
	require.NoError(t, err)
	aloneIDs, err := m.EmbedTokens(ctx, ids[:1], archgen.EmbedOptions{})
	require.NoError(t, err)
	r = post(`{"input": [5, 17, 42]}`)
	assert.Equal(t, aloneIDs, r.vectors(t))
	assert.Equal(t, 3, r.Usage.PromptTokens)
	r = post(fmt.Sprintf(`{"input": [[5, 17, 42], [%d, 72, 105]]}`, tinychat.BOS))
	assert.Equal(t, wantIDs, r.vectors(t))
	assert.Equal(t, 6, r.Usage.PromptTokens)

	m2, srv2 := embedServer(t, Options{EmbedPooling: "mean"})
	mean, err := m2.Embed(ctx, texts, archgen.EmbedOptions{Pooling: archgen.PoolMean})
	require.NoError(t, err)
	status, raw := postEmbeddings(t, srv2, string(body))
	require.Equal(t, http.StatusOK, status, "%s", raw)
	var rm embeddingsReply
	require.NoError(t, json.Unmarshal(raw, &rm))
	cutMean, err := m2.Embed(ctx, texts, archgen.EmbedOptions{Pooling: archgen.PoolMean, Dimensions: 8})
	require.NoError(t, err)
	assert.Equal(t, cutMean, rm.vectors(t))
	assert.NotEqual(t, mean, want)
}

// TestEmbeddingsErrors: each bad request gets a 400 (404 for a model a
// strict server does not run) in the OpenAI error shape, naming the field
// and, for one input among several, its index.
func TestEmbeddingsErrors(t *testing.T) {
	_, srv := embedServer(t, Options{ContextLength: 16, StrictModel: true})
	many := make([]string, MaxEmbeddingInputs+1)
	for i := range many {
		many[i] = "x"
	}
	manyBody, _ := json.Marshal(map[string]any{"input": many})
	long := strings.Repeat("y", 20)
	for _, c := range []struct {
		name, body   string
		status       int
		param, code  string
		msgFragments []string
	}{
		{"missing", `{"model": "tiny"}`, 400, "input", "missing_input", []string{"input: missing"}},
		{"null", `{"input": null}`, 400, "input", "missing_input", nil},
		{"empty array", `{"input": []}`, 400, "input", "empty_input", []string{"an empty array"}},
		{"empty string", `{"input": ["a", ""]}`, 400, "input[1]", "empty_input", []string{"input[1]: an empty string"}},
		{"lone empty string", `{"input": ""}`, 400, "input[0]", "empty_input", nil},
		{"empty token list", `{"input": [[1, 2], []]}`, 400, "input[1]", "empty_input", []string{"input[1]: no tokens"}},
		{"wrong type", `{"input": {"text": "a"}}`, 400, "input", "invalid_type", []string{"want a string, an array of strings"}},
		{"mixed", `{"input": ["a", 1]}`, 400, "input", "invalid_type", nil},
		{"fractional id", `{"input": [1.5]}`, 400, "input", "invalid_type", nil},
		{"id past the vocabulary", `{"input": [[1], [2, 256]]}`, 400, "input[1]", "invalid_value",
			[]string{"input[1]: token 256 (position 1) is outside the vocabulary of 256"}},
		{"negative id", `{"input": [-1]}`, 400, "input[0]", "invalid_value", nil},
		{"over the context", `{"input": ["a", "b", "c", "` + long + `"]}`, 400, "input[3]", "context_length_exceeded",
			[]string{"input[3]: 21 tokens, more than the model's context of 16"}},
		{"dimensions 0", `{"input": "a", "dimensions": 0}`, 400, "dimensions", "invalid_value", []string{"want 1 to the size of the model's embeddings, 64"}},
		{"dimensions past hidden", `{"input": "a", "dimensions": 65}`, 400, "dimensions", "invalid_value", []string{"dimensions: 65"}},
		{"dimensions not a number", `{"input": "a", "dimensions": "8"}`, 400, "dimensions", "invalid_type", nil},
		{"encoding_format", `{"input": "a", "encoding_format": "int8"}`, 400, "encoding_format", "invalid_value", []string{`"int8"`}},
		{"too many inputs", string(manyBody), 400, "input", "limit_exceeded", []string{"2049 inputs", "(2048)"}},
		{"model", `{"input": "a", "model": "other"}`, 404, "model", "model_not_found", nil},
		{"not JSON", `{"input": `, 400, "", "invalid_json", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, raw := postEmbeddings(t, srv, c.body)
			assert.Equal(t, c.status, status, "%s", raw)
			var e struct {
				Error struct {
					Message, Type string
					Param, Code   *string
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
			assert.Equal(t, "invalid_request_error", e.Error.Type)
			if c.param == "" {
				assert.Nil(t, e.Error.Param)
			} else if assert.NotNil(t, e.Error.Param, "%s", raw) {
				assert.Equal(t, c.param, *e.Error.Param)
			}
			if assert.NotNil(t, e.Error.Code, "%s", raw) {
				assert.Equal(t, c.code, *e.Error.Code)
			}
			for _, f := range c.msgFragments {
				assert.Contains(t, e.Error.Message, f)
			}
		})
	}
}

// TestEmbeddingsBesideGenerations: embedding requests run while the batch
// decodes generations, each answered with what it gets alone, and every
// generation finishes as well.
func TestEmbeddingsBesideGenerations(t *testing.T) {
	m, srv := embedServer(t, Options{})
	texts := []string{"Hello, world!", strings.Repeat("The quick brown fox. ", 20)} // 421 tokens: two chunks
	want, err := m.Embed(context.Background(), texts, archgen.EmbedOptions{PrefillStep: embedChunk})
	require.NoError(t, err)
	body, _ := json.Marshal(map[string]any{"input": texts})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := fmt.Sprintf(`{"prompt": "story %d", "max_tokens": 64}`, i)
			resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(req))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("completion: status %d", resp.StatusCode)
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(srv.URL+"/v1/embeddings", "application/json", strings.NewReader(string(body)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var r embeddingsReply
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("embeddings: status %d, %v", resp.StatusCode, err)
				return
			}
			for i, d := range r.Data {
				var got []float32
				if err := json.Unmarshal(d.Embedding, &got); err != nil || !assert.ObjectsAreEqual(want[i], got) {
					errs <- fmt.Errorf("embeddings: input %d beside generations differs from alone (%v)", i, err)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the requests did not finish")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestEmbeddingsTimeout: a request that waits past RequestTimeout for the
// embedding gate gets a 504.
func TestEmbeddingsTimeout(t *testing.T) {
	_, srv := embedServer(t, Options{RequestTimeout: time.Nanosecond})
	status, raw := postEmbeddings(t, srv, `{"input": "a"}`)
	assert.Equal(t, http.StatusGatewayTimeout, status, "%s", raw)
	assert.Contains(t, string(raw), "request_timeout")
}

// TestEmbeddingsPromptTokenLimit: Limits.PromptTokens bounds each input.
func TestEmbeddingsPromptTokenLimit(t *testing.T) {
	_, srv := embedServer(t, Options{Limits: Limits{PromptTokens: 4}})
	status, raw := postEmbeddings(t, srv, `{"input": [[1, 2, 3, 4], [1, 2, 3, 4, 5]]}`)
	assert.Equal(t, http.StatusBadRequest, status, "%s", raw)
	var e struct {
		Error struct{ Message, Param, Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(raw, &e))
	assert.Equal(t, "limit_exceeded", e.Error.Code)
	assert.Equal(t, "input[1]", e.Error.Param)
	assert.Equal(t, "input[1]: 5 tokens, more than this server takes in an input (4)", e.Error.Message)
}

// TestEmbeddingsFolderDefaults: without Options.EmbedPooling the server
// pools and normalizes as the model folder's sentence-transformers files
// say (here: the mean, not normalized); EmbedPooling given overrides them.
func TestEmbeddingsFolderDefaults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-embed")
	require.NoError(t, tinychat.Write(dir, nil, nil))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "modules.json"), []byte(`[
		{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
		{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]`), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(`{"pooling_mode_mean_tokens": true}`), 0o644))
	m, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
	require.NoError(t, err)
	defer m.Free()
	texts := []string{"Hello, world!", "a"}
	for pooling, opts := range map[string]archgen.EmbedOptions{
		"":     {Pooling: archgen.PoolMean, NoNormalize: true},
		"last": {Pooling: archgen.PoolLast},
	} {
		s, err := New(m, Options{ModelID: "tiny", MaxBatch: 1, EmbedPooling: pooling})
		require.NoError(t, err)
		srv := httptest.NewServer(s.Handler())
		want, err := m.Embed(context.Background(), texts, opts)
		require.NoError(t, err)
		body, _ := json.Marshal(map[string]any{"input": texts, "encoding_format": "float"})
		status, raw := postEmbeddings(t, srv, string(body))
		require.Equal(t, http.StatusOK, status, "%s", raw)
		var r embeddingsReply
		require.NoError(t, json.Unmarshal(raw, &r))
		assert.Equal(t, want, r.vectors(t), "pooling %q", pooling)
		srv.Close()
		s.Close()
	}
}
