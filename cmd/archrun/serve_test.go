package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/generate"
)

// servePrompts are the concurrent clients' prompts, one each.
var servePrompts = []string{
	"What is the capital of France?",
	"Name three colors.",
	"Write a haiku about the sea.",
	"How many legs does a spider have?",
	"Say hello in Spanish.",
	"What is 2 + 2?",
	"Give me a word that rhymes with cat.",
	"What do bees make?",
	"Describe the moon in one sentence.",
	"What is the opposite of hot?",
	"List two fruits.",
	"Why is the sky blue?",
	"Who wrote Hamlet?",
	"What is water made of?",
	"Tell me a fun fact about cats.",
	"What language is spoken in Brazil?",
}

// serverBinary builds archrun into a temporary folder.
func serverBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "archrun")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// startServer runs `archrun serve` on a free loopback port and returns its
// base URL; stderr collects what it prints.
func startServer(t *testing.T, bin string, args ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "-port", "0"}, args...)...)
	base, stderr := startCmd(t, cmd)
	return cmd, base, stderr
}

// startCmd starts cmd (archrun serve on a free port) and waits for the
// base URL it prints.
func startCmd(t *testing.T, cmd *exec.Cmd) (string, *syncBuffer) {
	t.Helper()
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	stderr := &syncBuffer{}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		re := regexp.MustCompile(`on (http://\S+/v1) `)
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case base := <-addr:
		return base, stderr
	case <-time.After(3 * time.Minute):
		t.Fatalf("the server did not start: %s", stderr.String())
	}
	return "", nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) WriteString(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(v)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeOpenAIClient runs the official openai Python client against
// `archrun serve` on SmolLM2: chat and completions streamed and not,
// sixteen concurrent clients each getting exactly the tokens generate.Tokens
// gives its prompt alone (greedy; compared through each token's bytes in
// logprobs, which name one id each), a client leaving mid-stream, and the bad requests
// with their status and error body; then openai-go does the chats again. Then SIGTERM lets a running stream
// finish before the process exits.
func TestServeOpenAIClient(t *testing.T) {
	python, err := filepath.Abs("../../.deps/py/bin/python")
	require.NoError(t, err)
	_, err = os.Stat(smolLM2)
	require.NoError(t, err, "run `make models` first")
	const maxTokens = 24

	// What each prompt gets alone, from the library.
	m, err := archgen.Load(context.Background(), smolLM2, archgen.LoadOptions{})
	require.NoError(t, err)
	type result struct {
		Prompt string `json:"prompt"`
		Text   string `json:"text"`
		Tokens int    `json:"tokens"`
		Finish string `json:"finish"`
		// IDs are the greedy tokens of the prompt alone, and TokenBytes
		// their bytes (what logprobs carry), for the chats.
		IDs        []int32 `json:"ids,omitempty"`
		TokenBytes [][]int `json:"token_bytes,omitempty"`
	}
	// Bytes stand for ids: in SmolLM2's byte-level vocabulary no two ids
	// have the same bytes (checked here over the whole vocabulary), so
	// equal bytes token by token are equal ids.
	byBytes := map[string]int32{}
	for id := int32(0); id < int32(m.Tokenizer.VocabSize()); id++ {
		b := string(m.Tokenizer.TokenBytes(id))
		prev, dup := byBytes[b]
		require.False(t, dup, "ids %d and %d both have bytes %q", prev, id, b)
		byBytes[b] = id
	}
	soloIDs := func(prompt string) ([]int32, [][]int) {
		ids, err := m.EncodeChat([]archgen.Message{{Role: "user", Content: prompt}}, nil)
		require.NoError(t, err)
		var out []int32
		_, err = generate.Tokens(context.Background(), m.Net, ids,
			generate.Options{MaxTokens: maxTokens, StopTokens: m.StopTokens},
			func(id int32) error { out = append(out, id); return nil })
		require.NoError(t, err)
		var bs [][]int
		for _, id := range out {
			var b []int
			for _, c := range m.Tokenizer.TokenBytes(id) {
				b = append(b, int(c))
			}
			bs = append(bs, b)
		}
		return out, bs
	}
	want := struct {
		Model      string   `json:"model"`
		MaxTokens  int      `json:"max_tokens"`
		Chats      []result `json:"chats"`
		Completion result   `json:"completion"`
		Sampled    result   `json:"sampled"`
	}{Model: "smollm2", MaxTokens: maxTokens}
	distinct := map[string]bool{}
	for _, p := range servePrompts {
		res, err := m.Chat(context.Background(), []archgen.Message{{Role: "user", Content: p}}, archgen.Options{MaxTokens: maxTokens}, nil)
		require.NoError(t, err)
		ids, bs := soloIDs(p)
		// The ids are the library's chat: as many, spelling its text.
		require.Len(t, ids, res.Tokens, "%q", p)
		require.Equal(t, res.Text, m.Tokenizer.Decode(ids, true), "%q", p)
		distinct[fmt.Sprint(ids)] = true
		want.Chats = append(want.Chats, result{p, res.Text, res.Tokens, string(res.Finish), ids, bs})
	}
	require.Len(t, distinct, len(servePrompts), "the prompts' greedy tokens are not all different")
	const prompt = "The three primary colors are"
	res, err := m.Generate(context.Background(), prompt, archgen.Options{MaxTokens: maxTokens}, nil)
	require.NoError(t, err)
	want.Completion = result{Prompt: prompt, Text: res.Text, Tokens: res.Tokens, Finish: string(res.Finish)}
	// Seeded sampling with every filter: the request's fields as the
	// python script sends them.
	sampling := generate.Sampling{Temp: 0.8, TopP: 0.9, TopK: 40, MinP: 0.05, RepetitionPenalty: 1.1, Seed: 7}
	res, err = m.Chat(context.Background(), []archgen.Message{{Role: "user", Content: servePrompts[2]}},
		archgen.Options{Sampling: sampling, MaxTokens: maxTokens}, nil)
	require.NoError(t, err)
	want.Sampled = result{Prompt: servePrompts[2], Text: res.Text, Tokens: res.Tokens, Finish: string(res.Finish)}
	m.Free()
	data, err := json.Marshal(want)
	require.NoError(t, err)
	expected := filepath.Join(t.TempDir(), "expected.json")
	require.NoError(t, os.WriteFile(expected, data, 0o644))

	bin := serverBinary(t)
	cmd, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2", "-max-batch", "16")
	py := exec.Command(python, "testdata/openai_serve.py", base, expected)
	out, err := py.CombinedOutput()
	t.Logf("openai client:\n%s", out)
	require.NoError(t, err, "server log:\n%s", stderr.String())
	require.Contains(t, string(out), "all checks passed")

	// The same server through openai-go.
	for _, c := range want.Chats[:4] {
		checkGoClient(t, base, "smollm2", maxTokens, c.Prompt, c.Text, c.Tokens, c.Finish)
	}

	// SIGTERM during a stream: the stream ends whole, then the process exits 0.
	body := `{"model": "smollm2", "messages": [{"role": "user", "content": "Count from one to fifty."}], "max_tokens": 40, "stream": true}`
	resp, err := http.Post(base+"/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	first, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first, "data: {"), "first line %q", first)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest, err := io.ReadAll(rd)
	require.NoError(t, err)
	assert.Regexp(t, `"finish_reason":"(stop|length)"`, string(rest), "the stream ends with its finish reason")
	assert.True(t, strings.HasSuffix(string(rest), "data: [DONE]\n\n"), "the stream's end: %q", tail(string(rest)))
	waitExit(t, cmd, stderr)
	assert.Contains(t, stderr.String(), "archrun serve: stopped")
	_, err = http.Get(base + "/models")
	assert.Error(t, err, "the server still answers after SIGTERM")
}

// waitExit waits up to a minute for the server to exit after a signal,
// and wants status 0.
func waitExit(t *testing.T, cmd *exec.Cmd, stderr *syncBuffer) {
	t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		assert.NoError(t, err, "exit after SIGTERM; log:\n%s", stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("the server did not exit after SIGTERM: %s", stderr.String())
	}
}

// checkGoClient asks for prompt's greedy chat with openai-go, streamed and
// not, and checks the text, token count and finish reason; then the client
// sees a 422 as an API error naming its field; a request naming another
// model is served.
func checkGoClient(t *testing.T, base, model string, maxTokens int, prompt, text string, tokens int, finish string) {
	t.Helper()
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(int64(maxTokens)),
	}
	r, err := client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	require.Len(t, r.Choices, 1)
	assert.Equal(t, text, r.Choices[0].Message.Content, "openai-go, %q", prompt)
	assert.Equal(t, finish, r.Choices[0].FinishReason)
	assert.Equal(t, int64(tokens), r.Usage.CompletionTokens)

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var got strings.Builder
	var gotFinish string
	var usage openai.CompletionUsage
	for stream.Next() {
		chunk := stream.Current()
		for _, ch := range chunk.Choices {
			got.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				gotFinish = ch.FinishReason
			}
		}
		if chunk.Usage.CompletionTokens > 0 {
			usage = chunk.Usage
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, text, got.String(), "openai-go streamed, %q", prompt)
	assert.Equal(t, finish, gotFinish)
	assert.Equal(t, int64(tokens), usage.CompletionTokens)

	// Another model's name (a client's default) is served all the same.
	other := params
	other.Model = "gpt-4o-mini"
	r, err = client.Chat.Completions.New(ctx, other)
	require.NoError(t, err)
	assert.Equal(t, text, r.Choices[0].Message.Content, "openai-go, model %q", other.Model)
	assert.Equal(t, model, r.Model)
	bad := params
	var apiErr *openai.Error
	bad.N = openai.Int(3)
	_, err = client.Chat.Completions.New(ctx, bad)
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnprocessableEntity, apiErr.StatusCode)
	assert.Equal(t, "n", apiErr.Param)
}

func tail(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("...%s", s[len(s)-200:])
	}
	return s
}

// TestServeFlags: serve's flags are checked before the model loads, a
// repo id missing from the cache is refused by name, and a memory budget
// below what the loaded process holds is refused saying what it holds.
func TestServeFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"serve"}, true, "-model is required"},
		{[]string{"serve", "-model", smolLM2, "-hf", "org/name"}, true, "-hf, -model and -gguf exclude each other"},
		{[]string{"serve", "-model", smolLM2, "-port", "70000"}, true, "-port 70000: want 0 to 65535"},
		{[]string{"serve", "-model", smolLM2, "-max-batch", "0"}, true, "-max-batch 0: want at least 1"},
		{[]string{"serve", "-model", smolLM2, "-prompt-cache-bytes", "lots"}, true, `-prompt-cache-bytes "lots"`},
		{[]string{"serve", "-model", smolLM2, "-max-tokens", "0"}, true, "-max-tokens 0: want at least 1"},
		{[]string{"serve", "-model", smolLM2, "-pooling", "max"}, true, `-pooling "max": want last, mean or cls`},
		{[]string{"serve", "-model", smolLM2, "-context-length", "-1"}, true, "-context-length -1"},
		{[]string{"serve", "-model", smolLM2, "-limit-body", "lots"}, true, `-limit-body "lots": want a positive size`},
		{[]string{"serve", "-model", smolLM2, "-kv-budget", "most"}, true, `-kv-budget "most": want a positive size such as 8GB, 512MiB or a number of bytes (or auto, off)`},
		{[]string{"serve", "-model", smolLM2, "-max-queue", "-1"}, true, "-max-queue -1: want a positive number (0: no bound)"},
		{[]string{"serve", "-model", smolLM2, "-memory-budget", "most"}, true, `-memory-budget "most": want a size (2GiB, 800MiB, bytes)`},
		{[]string{"serve", "-model", smolLM2, "-memory-budget", "1GiB", "-kv-budget", "512MiB"}, true, "-memory-budget and -kv-budget exclude each other: the memory budget holds the KV caches"},
		{[]string{"serve", "-model", smolLM2, "-memory-budget", "1MiB", "-prompt-cache-bytes", "0"}, false, "-memory-budget 1MiB: the process holds"},
		{[]string{"serve", "-model", smolLM2, "-heap-mmap-threshold", "big"}, true, `-heap-mmap-threshold "big": want a size up to 1GiB such as 1MiB, or 0`},
		{[]string{"serve", "-model", smolLM2, "-limit-messages", "-1"}, true, "-limit-messages -1: want a positive number (0: no bound)"},
		{[]string{"serve", "-model", smolLM2, "-write-timeout", "0s"}, true, "-write-timeout 0s: want a positive duration"},
		{[]string{"serve", "-model", smolLM2, "-request-timeout", "-1s"}, true, "-request-timeout -1s: want a positive duration"},
		{[]string{"serve", "-model", smolLM2, "-send-buffer", "2GiB"}, true, `-send-buffer "2GiB": want a size up to 1GiB`},
		{[]string{"serve", "-model", smolLM2, "-cors-origins", "ui.example"}, true, `-cors-origins: CORS origin "ui.example": want * or a scheme and host`},
		{[]string{"serve", "-model", smolLM2, "-cors-origins", "https://ui.example/app"}, true, `CORS origin "https://ui.example/app"`},
		{[]string{"serve", "-model", smolLM2, "-access-log", "/no/such/dir/log"}, false, "-access-log: open /no/such/dir/log"},
		{[]string{"serve", "-hf", "no-such-org/no-such-model", "-port", "0", "-offline"}, false, "no-such-org/no-such-model"},
		{[]string{"serve", "-model", smolLM2, "-api-key-file", "testdata/no-such-keys"}, false, "-api-key-file: open testdata/no-such-keys"},
		{[]string{"serve", "-model", smolLM2, "-api-key-file", writeKeys(t, "# no keys\n\n")}, false, "no keys in it"},
		{[]string{"serve", "-model", smolLM2, "-api-key-file", writeKeys(t, "sk-a sk-b\n")}, false, `line "sk-a sk-b" holds a space; one key a line`},
	} {
		err := run(tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		require.Error(t, err, "archrun %q", tc.args)
		var u usageError
		assert.Equal(t, tc.usage, errors.As(err, &u), "archrun %q: %v", tc.args, err)
		assert.Contains(t, err.Error(), tc.want, "archrun %q", tc.args)
	}
}

// writeKeys writes a key file into a temporary folder.
func writeKeys(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// TestServeAPIKeys: a server started with keys (-api-key, a key file of
// two, ARCHGEN_API_KEY) answers openai-go's requests carrying any of them
// and refuses those without one, or with another, with 401 invalid_api_key
// in the OpenAI error shape; GET /health stays open to probes.
func TestServeAPIKeys(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	bin := serverBinary(t)
	keyFile := writeKeys(t, "# operators\nsk-file-one\n\nsk-file-two\n")
	cmd := exec.Command(bin, "serve", "-port", "0", "-gguf", smolLM2, "-served-model-name", "smollm2",
		"-api-key", "sk-flag", "-api-key-file", keyFile)
	cmd.Env = append(os.Environ(), "ARCHGEN_API_KEY=sk-env")
	base, stderr := startCmd(t, cmd)
	ctx := context.Background()
	chat := func(key string) error {
		client := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(key), option.WithMaxRetries(0))
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "smollm2",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hi.")},
			MaxTokens: openai.Int(4),
		})
		return err
	}
	for _, key := range []string{"sk-flag", "sk-file-one", "sk-file-two", "sk-env"} {
		require.NoError(t, chat(key), "key %s: %s", key, stderr.String())
	}
	for _, key := range []string{"sk-other", "sk-flagx", ""} {
		err := chat(key)
		var apiErr *openai.Error
		require.ErrorAs(t, err, &apiErr, "key %q", key)
		assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode, "key %q", key)
		assert.Equal(t, "invalid_api_key", apiErr.Code, "key %q", key)
	}
	// no Authorization header at all, and the open probe
	resp, err := http.Get(base + "/models")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, string(body), "missing API key")
	assert.NotContains(t, string(body), "sk-", "the answer names no key")
	resp, err = http.Get(strings.TrimSuffix(base, "/v1") + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestServeMetrics: GET /metrics, read by Prometheus's own text parser
// (prometheus/common/expfmt), counts what the server answered: requests by
// path and status (an unknown path as "other"), the tokens of the
// generations as their usage gave them, a time to first token per
// generation and an inter-token gap per later token; it is open where keys
// guard the API.
func TestServeMetrics(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	bin := serverBinary(t)
	_, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2", "-api-key", "sk-metrics")
	root := strings.TrimSuffix(base, "/v1")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("sk-metrics"), option.WithMaxRetries(0))
	var prompt, completion int64
	for _, p := range []string{"Say hi.", "Name a color."} {
		r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "smollm2",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(p)},
			MaxTokens: openai.Int(6),
		})
		require.NoError(t, err, stderr.String())
		prompt += r.Usage.PromptTokens
		completion += r.Usage.CompletionTokens
	}
	resp, err := http.Post(root+"/v1/engines", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = http.Get(root + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "without a key")
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	value := func(name string, labels map[string]string) float64 {
		f, ok := families[name]
		require.True(t, ok, "no %s", name)
		for _, m := range f.Metric {
			match := true
			for k, v := range labels {
				found := false
				for _, l := range m.Label {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				match = match && found
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("%s%v: no sample", name, labels)
		return 0
	}
	assert.Equal(t, 2.0, value("archgen_requests_total", map[string]string{"path": "/v1/chat/completions", "status": "200"}))
	assert.Equal(t, 1.0, value("archgen_requests_total", map[string]string{"path": "other", "status": "401"}), "the unknown path, without a key")
	assert.Equal(t, float64(prompt), value("archgen_prompt_tokens_total", nil))
	assert.Equal(t, float64(completion), value("archgen_generated_tokens_total", nil))
	assert.Equal(t, 2.0, value("archgen_time_to_first_token_seconds", nil), "one a generation")
	assert.Equal(t, float64(completion-2), value("archgen_inter_token_seconds", nil), "one a later token")
	assert.Equal(t, 0.0, value("archgen_queue_waiting", nil))
	assert.Equal(t, 8.0, value("archgen_batch_max", nil))
	assert.Greater(t, value("archgen_memory_active_bytes", nil), 1e8, "the weights at least")
	// the second prompt shares the first's template prefix: its cached
	// entry is copied once, where the prompt's own tokens are written
	assert.Positive(t, value("archgen_prompt_cache_hits_total", nil))
	assert.Positive(t, value("archgen_kv_copied_bytes_total", nil))
}
