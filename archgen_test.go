package archgen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/internal/tinychat"
)

// tinyDir is a tiny chat checkpoint (internal/tinychat) TestMain writes.
var tinyDir string

// smolLM2 is the real checkpoint `make models` fetches.
const smolLM2 = ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"

func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "archgen-tiny-")
	if err != nil {
		panic(err)
	}
	tinyDir = filepath.Join(tmp, "tiny-chat")
	if err := tinychat.Write(tinyDir, nil, nil); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

func load(t *testing.T, path string) *archgen.Model {
	t.Helper()
	m, err := archgen.Load(context.Background(), path, archgen.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(m.Free)
	return m
}

// published reads eos_token_id from a published config in gen/testdata.
func published(t *testing.T, file string) any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("gen/testdata/configs", file))
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(b, &c))
	require.Contains(t, c, "eos_token_id")
	return c["eos_token_id"]
}

// TestStopTokensMatchMLXLM: the stop set of checkpoints shaped as gemma-2
// and glm-4 publish theirs (eos_token_id lists in config.json), and of
// generation_config.json in its forms, equals the eos_token_ids mlx-lm's
// load gives the same directories.
func TestStopTokensMatchMLXLM(t *testing.T) {
	py, err := filepath.Abs(".deps/py/bin/python")
	require.NoError(t, err)
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	gemma2 := published(t, "gemma2/gemma-2-2b.json")
	glm4 := published(t, "glm4/glm-4-9b-0414.json")
	cases := []struct {
		name       string
		config     map[string]any
		generation any // map, or a string written as the file's bytes
	}{
		{"gemma-2 list in config.json", map[string]any{"eos_token_id": gemma2}, nil},
		{"glm-4 list in config.json", map[string]any{"eos_token_id": glm4}, nil},
		{"gemma-2 list in generation_config.json", map[string]any{"eos_token_id": 1}, map[string]any{"eos_token_id": gemma2}},
		{"generation_config.json replaces config.json", map[string]any{"eos_token_id": glm4}, map[string]any{"eos_token_id": 9}},
		{"generation_config.json id 0 is ignored", map[string]any{"eos_token_id": glm4}, map[string]any{"eos_token_id": 0}},
		{"generation_config.json list [0] is taken", map[string]any{"eos_token_id": glm4}, map[string]any{"eos_token_id": []int{0}}},
		{"generation_config.json empty list is ignored", map[string]any{"eos_token_id": 5}, map[string]any{"eos_token_id": []int{}}},
		{"generation_config.json not JSON is ignored", map[string]any{"eos_token_id": gemma2}, "{not json"},
		{"no eos_token_id anywhere", map[string]any{"eos_token_id": nil}, map[string]any{"do_sample": true}},
	}
	root := t.TempDir()
	var dirs []string
	for i, c := range cases {
		dir := filepath.Join(root, fmt.Sprint(i))
		gen, _ := c.generation.(map[string]any)
		require.NoError(t, tinychat.Write(dir, c.config, gen))
		if s, ok := c.generation.(string); ok {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(s), 0o644))
		}
		dirs = append(dirs, dir)
	}
	out, err := exec.Command(py, append([]string{"testdata/stops/mlxlm_eos.py"}, dirs...)...).Output()
	require.NoError(t, err, "mlx-lm: %s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, len(cases))
	for i, c := range cases {
		var want []int32
		require.NoError(t, json.Unmarshal([]byte(lines[i]), &want))
		m := load(t, dirs[i])
		assert.Equal(t, want, m.StopTokens, c.name)
	}
	// The lists themselves, as published, are what a chat stops on.
	assert.Equal(t, []any{1.0, 107.0}, gemma2)
	assert.Equal(t, []any{151329.0, 151336.0, 151338.0}, glm4)
}

// TestStopListEndsTurn: a token that only config.json's eos_token_id list
// names (not the tokenizer's eos) ends generation.
func TestStopListEndsTurn(t *testing.T) {
	ctx := context.Background()
	m := load(t, tinyDir)
	msgs := []archgen.Message{{Role: "user", Content: "hello"}}
	free, err := m.Chat(ctx, msgs, archgen.Options{MaxTokens: 4}, nil)
	require.NoError(t, err)
	require.Equal(t, 4, free.Tokens)
	first := m.Tokenizer.Encode(free.Text, false)[0]

	dir := filepath.Join(t.TempDir(), "listed")
	require.NoError(t, tinychat.Write(dir, map[string]any{"eos_token_id": []int32{tinychat.EndOfText, first}}, nil))
	listed := load(t, dir)
	res, err := listed.Chat(ctx, msgs, archgen.Options{MaxTokens: 4}, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Tokens)
	assert.Equal(t, "stop", string(res.Finish))
	assert.Equal(t, first, res.Stats.StopToken)
}

func TestStopTokensErrors(t *testing.T) {
	_, err := archgen.StopTokens([]byte(`{"eos_token_id": "</s>"}`), nil, -1)
	assert.EqualError(t, err, `config.json: eos_token_id: want a token id or a list of them, got "</s>"`)
	_, err = archgen.StopTokens([]byte(`{}`), []byte(`{"eos_token_id": [1, "x"]}`), -1)
	assert.EqualError(t, err, `generation_config.json: eos_token_id: want a token id or a list of them, got [1, "x"]`)
}

// TestEncodingAddsNoSecondBOS: the chat template writes the bos token and
// Chat does not add another; a plain prompt gets one, unless it has one.
func TestEncodingAddsNoSecondBOS(t *testing.T) {
	m := load(t, tinyDir)
	ids, err := m.EncodeChat([]archgen.Message{{Role: "user", Content: "hi"}}, nil)
	require.NoError(t, err)
	assert.Equal(t, []int32{tinychat.BOS, tinychat.IMStart}, ids[:2])
	assert.Equal(t, 1, count(ids, tinychat.BOS))
	for _, p := range []string{"hi", "<s>hi"} {
		ids, err := m.EncodePrompt(p)
		require.NoError(t, err)
		assert.Equal(t, []int32{tinychat.BOS, 'h', 'i'}, ids, p)
	}
}

func count(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestSessionReusesCache: a session's second turn runs only the tokens
// after the first turn's, and answers as a fresh chat over the whole
// conversation does.
func TestSessionReusesCache(t *testing.T) {
	ctx := context.Background()
	m := load(t, tinyDir)
	s, err := m.NewSession(archgen.Options{}.KV)
	require.NoError(t, err)
	defer s.Free()
	opts := archgen.Options{MaxTokens: 6}
	msgs := []archgen.Message{{Role: "user", Content: "abc"}}
	r1, err := s.Chat(ctx, msgs, opts, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, r1.CachedTokens)
	assert.Equal(t, r1.PromptTokens, r1.Processed())
	assert.Equal(t, r1.PromptTokens+r1.Tokens-1, s.Cached(), "the cache holds the prompt and every token but the last drawn")

	msgs = append(msgs, archgen.Message{Role: "assistant", Content: r1.Text}, archgen.Message{Role: "user", Content: "def"})
	r2, err := s.Chat(ctx, msgs, opts, nil)
	require.NoError(t, err)
	full, err := m.EncodeChat(msgs, nil)
	require.NoError(t, err)
	assert.Equal(t, len(full), r2.PromptTokens)
	assert.GreaterOrEqual(t, r2.CachedTokens, r1.PromptTokens, "the first turn's prompt is reused")
	assert.Less(t, r2.Processed(), len(full)-r1.PromptTokens+1)

	fresh, err := m.Chat(ctx, msgs, opts, nil)
	require.NoError(t, err)
	assert.Equal(t, len(full), fresh.Processed())
	assert.Equal(t, fresh.Text, r2.Text)

	// Saved and loaded, the session goes on where it was.
	file := filepath.Join(t.TempDir(), "chat.safetensors")
	require.NoError(t, s.Save(file, map[string]string{"note": "x"}))
	tokens := s.Tokens()
	s.Reset()
	assert.Equal(t, 0, s.Cached())
	meta, err := s.Load(file)
	require.NoError(t, err)
	assert.Equal(t, "x", meta["note"])
	assert.Equal(t, tinyDir, meta["model"])
	assert.Equal(t, tokens, s.Tokens())
	msgs = append(msgs, archgen.Message{Role: "assistant", Content: r2.Text}, archgen.Message{Role: "user", Content: "g"})
	r3, err := s.Chat(ctx, msgs, opts, nil)
	require.NoError(t, err)
	assert.Greater(t, r3.CachedTokens, r2.PromptTokens-1)
}

func TestPromptProgress(t *testing.T) {
	m := load(t, tinyDir)
	var seen [][2]int
	prompt := strings.Repeat("abcdefgh", 10)
	res, err := m.Generate(context.Background(), prompt, archgen.Options{MaxTokens: 1, PrefillStep: 32,
		OnPrompt: func(done, total int) { seen = append(seen, [2]int{done, total}) }}, nil)
	require.NoError(t, err)
	assert.Equal(t, 81, res.PromptTokens)
	assert.Equal(t, [][2]int{{32, 81}, {64, 81}, {80, 81}, {81, 81}}, seen)
}

func TestCancelledPrompt(t *testing.T) {
	m := load(t, tinyDir)
	ctx, cancel := context.WithCancel(context.Background())
	prompt := strings.Repeat("abcdefgh", 10)
	res, err := m.Generate(ctx, prompt, archgen.Options{PrefillStep: 16,
		OnPrompt: func(done, total int) {
			if done >= 32 {
				cancel()
			}
		}}, nil)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "cancelled", string(res.Finish))
	assert.Equal(t, 32, res.Stats.PromptDone)
}

// TestResolve: the paths Load takes, and the errors that say what to pass.
func TestResolve(t *testing.T) {
	hub := t.TempDir()
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", filepath.Dir(hub))
	hub = filepath.Join(filepath.Dir(hub), "hub")
	repo := filepath.Join(hub, "models--org--tiny-chat")
	snap := filepath.Join(repo, "snapshots", "0123abcd")
	require.NoError(t, tinychat.Write(snap, nil, nil))
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "snapshots", "9999ffff"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("0123abcd"), 0o644))

	for _, p := range []string{"org/tiny-chat", repo, filepath.Join(repo, "snapshots"), snap} {
		r, err := archgen.Resolve(p)
		require.NoError(t, err, p)
		assert.Equal(t, archgen.Resolved{Kind: archgen.KindDir, Path: snap}, r, p)
	}
	m := load(t, "org/tiny-chat")
	assert.Equal(t, snap, m.Source.Path)

	gg, err := filepath.Abs(smolLM2)
	require.NoError(t, err)
	r, err := archgen.Resolve(gg)
	require.NoError(t, err)
	assert.Equal(t, archgen.KindGGUF, r.Kind)

	noRef := filepath.Join(hub, "models--org--two")
	for _, rev := range []string{"aaaa", "bbbb"} {
		require.NoError(t, os.MkdirAll(filepath.Join(noRef, "snapshots", rev), 0o755))
	}
	empty := t.TempDir()
	withGGUF := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(withGGUF, "m.Q4_0.gguf"), []byte("GGUF"), 0o644))
	text := filepath.Join(empty, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("hello"), 0o644))
	for _, c := range []struct{ path, want string }{
		{hub, hub + " is a Hugging Face cache, not a model: pass a repo id (org/tiny-chat, org/two) or one of its models--ORG--NAME folders"},
		{noRef, noRef + " is a Hugging Face cache folder without refs/main and with 2 snapshots (aaaa, bbbb): pass one of them, " + filepath.Join(noRef, "snapshots", "aaaa")},
		{"org/absent", "org/absent is neither a path nor a repo in the Hugging Face cache (" + hub + "): archgen reads the cache but does not download; fetch it first (hf download org/absent)"},
		{empty, empty + " has no config.json: a model directory holds config.json, the weights (model.safetensors, or model-*-of-*.safetensors with model.safetensors.index.json) and tokenizer.json (with tokenizer_config.json)"},
		{withGGUF, withGGUF + " has no config.json but holds m.Q4_0.gguf: pass the .gguf file itself"},
		{text, text + ": a file, but not a GGUF file: pass a model directory (a model directory holds config.json, the weights (model.safetensors, or model-*-of-*.safetensors with model.safetensors.index.json) and tokenizer.json (with tokenizer_config.json)) or a .gguf file"},
	} {
		_, err := archgen.Load(context.Background(), c.path, archgen.LoadOptions{})
		assert.EqualError(t, err, c.want)
	}
	require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("feed"), 0o644))
	_, err = archgen.Resolve(repo)
	assert.EqualError(t, err, repo+`: refs/main names revision "feed", which snapshots/ does not hold: the download is incomplete; fetch it again, or pass a folder under `+filepath.Join(repo, "snapshots"))
}

// TestMissingTokenizerBeforeWeights: a directory without tokenizer.json is
// refused before its weights are read (here they are not even valid).
func TestMissingTokenizerBeforeWeights(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, tinychat.Write(dir, nil, nil))
	require.NoError(t, os.Remove(filepath.Join(dir, "tokenizer.json")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("broken"), 0o644))
	_, err := archgen.Load(context.Background(), dir, archgen.LoadOptions{})
	assert.EqualError(t, err, dir+": no tokenizer.json: archgen reads the tokenizer from tokenizer.json (tokenizer.model alone is not enough); copy it from the checkpoint's repo, or convert the model with mlx_lm.convert, which writes it")
	// Without a tokenizer the weights are what fails.
	_, err = archgen.Load(context.Background(), dir, archgen.LoadOptions{NoTokenizer: true})
	assert.ErrorContains(t, err, "model.safetensors")
}

func TestSessionLoadOtherModel(t *testing.T) {
	m := load(t, tinyDir)
	s, err := m.NewSession(archgen.Options{}.KV)
	require.NoError(t, err)
	defer s.Free()
	_, err = s.Chat(context.Background(), []archgen.Message{{Role: "user", Content: "x"}}, archgen.Options{MaxTokens: 2}, nil)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "c.safetensors")
	require.NoError(t, s.Save(file, nil))
	real := load(t, smolLM2)
	rs, err := real.NewSession(archgen.Options{}.KV)
	require.NoError(t, err)
	defer rs.Free()
	_, err = rs.Load(file)
	assert.EqualError(t, err, file+": holds 2 caches, the model keeps 30: the file was made with another model ("+tinyDir+")")
	assert.True(t, slices.Equal(rs.Tokens(), nil))
}

// TestSessionChatOnForeignCache: a cache mlx_lm.cache_prompt wrote lists
// no tokens; Chat refuses it, Append continues it.
func TestSessionChatOnForeignCache(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mlxlm.safetensors")
	tool, err := filepath.Abs(".deps/py/bin/mlx_lm.cache_prompt")
	require.NoError(t, err)
	out, err := exec.Command(tool, "--model", tinyDir, "--prompt", "abc", "--prompt-cache-file", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := load(t, tinyDir)
	s, err := m.NewSession(archgen.Options{}.KV)
	require.NoError(t, err)
	defer s.Free()
	meta, err := s.Load(file)
	require.NoError(t, err)
	assert.Equal(t, tinyDir, meta["model"])
	assert.Nil(t, s.Tokens())
	assert.Equal(t, 10, s.Cached(), "<s>, <|im_start|> and the 8 bytes of \"user\\nabc\"")
	_, err = s.Chat(context.Background(), []archgen.Message{{Role: "user", Content: "x"}}, archgen.Options{MaxTokens: 2}, nil)
	assert.EqualError(t, err, "the session's cache came from a file that does not list its tokens: a chat cannot tell which of its turns the cache holds (continue it with Append)")
	res, err := s.Append(context.Background(), []int32{'d'}, archgen.Options{MaxTokens: 2}, nil)
	require.NoError(t, err)
	assert.Equal(t, 10, res.CachedTokens)
	assert.Equal(t, 1, res.Processed())
}

// TestSessionSaveLoadFewerCaches: a session of a model whose feed-forward
// layers keep no cache (nemotron_h: fewer caches than layers) saves and
// loads its caches, and the loaded session continues as the saved one
// would have.
func TestSessionSaveLoadFewerCaches(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-nemotron")
	require.NoError(t, tinychat.WriteParity(dir, "nemotron_h", "pattern_moe", nil, nil))
	m := load(t, dir)
	msgs := []archgen.Message{{Role: "user", Content: "tell me about the sea"}}
	s, err := m.NewSession(archgen.Options{}.KV)
	require.NoError(t, err)
	defer s.Free()
	_, err = s.Chat(context.Background(), msgs, archgen.Options{MaxTokens: 4}, nil)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "c.safetensors")
	require.NoError(t, s.Save(file, nil))
	loaded, err := m.NewSession(archgen.Options{}.KV)
	require.NoError(t, err)
	defer loaded.Free()
	_, err = loaded.Load(file)
	require.NoError(t, err)
	assert.Equal(t, s.Tokens(), loaded.Tokens())
	more := []int32{40, 41, 42}
	a, err := s.Append(context.Background(), more, archgen.Options{MaxTokens: 6}, nil)
	require.NoError(t, err)
	b, err := loaded.Append(context.Background(), more, archgen.Options{MaxTokens: 6}, nil)
	require.NoError(t, err)
	assert.Equal(t, a.Text, b.Text, "the loaded session continues as the saved one")
	assert.Equal(t, s.Tokens(), loaded.Tokens())
}
