package archgen_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/hub"
	"github.com/archgen/archgen/hub/hubtest"
)

// hubRepo serves the tiny chat checkpoint as org/tiny-chat from a local
// Hub, and points the environment's Hugging Face cache at an empty folder
// of the test's; it returns the server and the cache.
func hubRepo(t *testing.T) (*hubtest.Server, string) {
	t.Helper()
	cache := hubtest.Isolate(t)
	srv := hubtest.New(t)
	files := hubtest.Files(t, tinyDir)
	files["README.md"] = []byte("# tiny-chat\n")
	srv.Add("org/tiny-chat", "main", files)
	return srv, cache
}

// TestLoadDownloads: Load of a repo id the cache lacks, with Download,
// fetches it from the Hub (reporting progress) and chats as the checkpoint
// does from its own folder; the next Load reads the cache and asks the
// network nothing. Without Download, Load stays offline and says so.
func TestLoadDownloads(t *testing.T) {
	srv, cache := hubRepo(t)
	ctx := context.Background()
	_, err := archgen.Load(ctx, "org/tiny-chat", archgen.LoadOptions{})
	assert.EqualError(t, err, "org/tiny-chat is neither a path nor a repo in the Hugging Face cache ("+cache+"): archgen reads the cache but does not download; fetch it first (hf download org/tiny-chat)")
	assert.Empty(t, srv.Requests())

	done := map[string]int64{}
	m, err := archgen.Load(ctx, "org/tiny-chat", archgen.LoadOptions{Download: true, Hub: hub.Options{
		Endpoint: srv.URL,
		Progress: func(file string, d, total int64) { done[file] = d },
	}})
	require.NoError(t, err)
	defer m.Free()
	assert.True(t, strings.HasPrefix(m.Source.Path, filepath.Join(cache, "models--org--tiny-chat", "snapshots")), m.Source.Path)
	st, err := os.Stat(filepath.Join(tinyDir, "model.safetensors"))
	require.NoError(t, err)
	assert.Equal(t, st.Size(), done["model.safetensors"])
	assert.NotContains(t, done, "README.md", "only a model's files are fetched")

	msgs := []archgen.Message{{Role: "user", Content: "hello"}}
	got, err := m.Chat(ctx, msgs, archgen.Options{MaxTokens: 8}, nil)
	require.NoError(t, err)
	want, err := load(t, tinyDir).Chat(ctx, msgs, archgen.Options{MaxTokens: 8}, nil)
	require.NoError(t, err)
	assert.Equal(t, want.Text, got.Text)
	assert.Positive(t, got.Tokens)

	n := len(srv.Requests())
	again, err := archgen.Load(ctx, "org/tiny-chat", archgen.LoadOptions{Download: true, Hub: hub.Options{Endpoint: srv.URL}})
	require.NoError(t, err)
	again.Free()
	assert.Len(t, srv.Requests(), n, "a cached repo loads without the network")
	again = load(t, "org/tiny-chat")
	assert.Equal(t, m.Source, again.Source)
}

// TestLoadDownloadErrors: with Download, a repo the Hub lacks is its 404,
// a revision neither cached nor on the Hub its own; HF_HUB_OFFLINE keeps
// Load from the network with the cache's answer.
func TestLoadDownloadErrors(t *testing.T) {
	srv, cache := hubRepo(t)
	ctx := context.Background()
	opts := archgen.LoadOptions{Download: true, Hub: hub.Options{Endpoint: srv.URL}}
	_, err := archgen.Load(ctx, "org/absent", opts)
	assert.EqualError(t, err, "hub: org/absent@main: GET "+srv.URL+`/api/models/org/absent/revision/main: 404 Not Found: no such repo or revision on the Hub (check the repo id and the revision) (the Hub: "Repository not found")`)
	_, err = archgen.Load(ctx, "org/tiny-chat@v9", opts)
	assert.EqualError(t, err, "hub: org/tiny-chat@v9: GET "+srv.URL+`/api/models/org/tiny-chat/revision/v9: 404 Not Found: the repo has no revision "v9" (a branch, a tag or a commit hash) (the Hub: "Invalid rev id: v9")`)

	t.Setenv("HF_HUB_OFFLINE", "1")
	_, err = archgen.Load(ctx, "org/tiny-chat", opts)
	assert.EqualError(t, err, "hub: org/tiny-chat@main: offline (HF_HUB_OFFLINE), and the Hugging Face cache ("+cache+") does not hold it: unset HF_HUB_OFFLINE to download it")
	assert.Len(t, srv.Requests(), 2)

	// A revision by name: fetched, then found in the cache offline.
	t.Setenv("HF_HUB_OFFLINE", "")
	commit := srv.Add("org/tiny-chat", "v1", hubtest.Files(t, tinyDir))
	m, err := archgen.Load(ctx, "org/tiny-chat", archgen.LoadOptions{Download: true, Hub: hub.Options{Endpoint: srv.URL, Revision: "v1"}})
	require.NoError(t, err)
	m.Free()
	assert.Equal(t, filepath.Join(cache, "models--org--tiny-chat", "snapshots", commit), m.Source.Path)
	t.Setenv("HF_HUB_OFFLINE", "1")
	for _, ref := range []string{"org/tiny-chat@v1", "org/tiny-chat@" + commit} {
		r, err := archgen.Resolve(ref)
		require.NoError(t, err, ref)
		assert.Equal(t, m.Source, r, ref)
	}
	_, err = archgen.Resolve("org/tiny-chat@v2")
	assert.EqualError(t, err, "org/tiny-chat@v2: the Hugging Face cache holds org/tiny-chat but not its revision v2 (no refs/v2 nor snapshots/v2 in "+
		filepath.Join(cache, "models--org--tiny-chat")+"): fetch it first (hf download org/tiny-chat --revision v2)")
}
