package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/hub/hubtest"
)

// tinyHub serves the tiny chat checkpoint as org/tiny-chat (with a
// README and a GGUF file beside it) from a local Hub.
func tinyHub(t *testing.T) (*hubtest.Server, string) {
	t.Helper()
	dir := tiny(t, nil)
	files := map[string][]byte{"README.md": []byte("# tiny-chat\n"), "tiny-chat.Q4_0.gguf": []byte("GGUF, not really")}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = b
	}
	srv := hubtest.New(t)
	return srv, srv.Add("org/tiny-chat", "main", files)
}

// snapshotFiles lists a snapshot folder's files.
func snapshotFiles(t *testing.T, snap string) []string {
	t.Helper()
	entries, err := os.ReadDir(snap)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestPull: archrun pull fetches a model's files into the cache and prints
// the snapshot folder; flags go before or after the repo id; -include and
// -exclude pick the files; a second pull fetches nothing; errors name the
// repo and the status, and a command line without a repo id is a usage
// error.
func TestPull(t *testing.T) {
	cache := hubtest.Isolate(t)
	srv, commit := tinyHub(t)
	snap := filepath.Join(cache, "models--org--tiny-chat", "snapshots", commit)
	var stdout, stderr bytes.Buffer
	require.NoError(t, run([]string{"pull", "-endpoint", srv.URL, "org/tiny-chat"}, &stdout, &stderr))
	assert.Equal(t, snap+"\n", stdout.String())
	assert.Equal(t, []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}, snapshotFiles(t, snap))
	assert.Regexp(t, `(?m)^fetched model\.safetensors \(515\.3 KiB\)$`, stderr.String())
	assert.Regexp(t, `(?m)^fetched config\.json \(\d+ B\)$`, stderr.String())

	n := len(srv.Requests())
	stdout.Reset()
	stderr.Reset()
	require.NoError(t, run([]string{"pull", "org/tiny-chat@main", "-endpoint", srv.URL}, &stdout, &stderr))
	assert.Equal(t, snap+"\n", stdout.String())
	assert.Empty(t, stderr.String(), "nothing fetched, nothing said")
	assert.Len(t, srv.Requests(), n+1)

	other := t.TempDir()
	stdout.Reset()
	require.NoError(t, run([]string{"pull", "org/tiny-chat", "-endpoint", srv.URL, "-cache-dir", other,
		"-include", "*.gguf, *.md,config.json", "-exclude", "README*"}, &stdout, nil))
	otherSnap := filepath.Join(other, "models--org--tiny-chat", "snapshots", commit)
	assert.Equal(t, otherSnap+"\n", stdout.String())
	assert.Equal(t, []string{"config.json", "tiny-chat.Q4_0.gguf"}, snapshotFiles(t, otherSnap))

	var help bytes.Buffer
	require.ErrorIs(t, run([]string{"pull", "-h"}, &help, nil), errHelp)
	assert.Contains(t, help.String(), "usage: archrun pull ORG/NAME[@REVISION] [-include GLOB,...] [-exclude GLOB,...] [-endpoint URL]")
	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"pull"}, true, "pull needs a repo id: archrun pull ORG/NAME[@REVISION]"},
		{[]string{"pull", "-endpoint", srv.URL}, true, "pull needs a repo id: archrun pull ORG/NAME[@REVISION]"},
		{[]string{"pull", "org/tiny-chat", "extra"}, true, `unexpected arguments ["extra"] ("archrun pull -h" lists the flags)`},
		{[]string{"pull", "org/tiny-chat", "-x"}, true, `flag provided but not defined: -x ("archrun pull -h" lists the flags)`},
		{[]string{"pull", "no repo"}, true, `"no repo" is not a Hugging Face repo id: want ORG/NAME (letters, digits, '-', '_' and '.'), or ORG/NAME@REVISION`},
		{[]string{"pull", "org/x@"}, true, `org/x@: revision "": want a branch, a tag or a commit hash`},
		{[]string{"pull", "org/absent", "-endpoint", srv.URL}, false, "hub: org/absent@main: GET " + srv.URL + `/api/models/org/absent/revision/main: 404 Not Found: no such repo or revision on the Hub (check the repo id and the revision) (the Hub: "Repository not found")`},
	} {
		err := run(c.args, nil, nil)
		var u usageError
		assert.Equal(t, c.usage, errors.As(err, &u), "%q: %v", c.args, err)
		assert.EqualError(t, err, c.want, "%q", c.args)
	}
}

// TestModelFromHub: -model ORG/NAME downloads a repo the cache lacks
// (from HF_ENDPOINT) and runs it; once cached it runs with the Hub gone;
// -offline and HF_HUB_OFFLINE keep archrun to the cache.
func TestModelFromHub(t *testing.T) {
	cache := hubtest.Isolate(t)
	srv, commit := tinyHub(t)
	t.Setenv("HF_ENDPOINT", srv.URL)
	err := run([]string{"generate", "-m", "org/tiny-chat", "-p", "hi", "-n", "2", "-offline"}, nil, nil)
	assert.EqualError(t, err, "org/tiny-chat is neither a path nor a repo in the Hugging Face cache ("+cache+"): archgen reads the cache but does not download; fetch it first (hf download org/tiny-chat)")
	t.Setenv("HF_HUB_OFFLINE", "1")
	err = run([]string{"generate", "-m", "org/tiny-chat", "-p", "hi", "-n", "2"}, nil, nil)
	assert.EqualError(t, err, "hub: org/tiny-chat@main: offline (HF_HUB_OFFLINE), and the Hugging Face cache ("+cache+") does not hold it: unset HF_HUB_OFFLINE to download it")
	assert.Empty(t, srv.Requests())

	t.Setenv("HF_HUB_OFFLINE", "")
	var stdout bytes.Buffer
	require.NoError(t, run([]string{"generate", "-m", "org/tiny-chat", "-p", "hi", "-n", "2", "-verbose=false"}, &stdout, nil))
	assert.NotEmpty(t, stdout.String())
	assert.FileExists(t, filepath.Join(cache, "models--org--tiny-chat", "snapshots", commit, "model.safetensors"))

	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1") // no Hub there
	var again bytes.Buffer
	require.NoError(t, run([]string{"generate", "-m", "org/tiny-chat", "-p", "hi", "-n", "2", "-verbose=false"}, &again, nil))
	assert.Equal(t, stdout.String(), again.String())
}

// TestPullBinary runs the real binary: pull on a terminal shows a progress
// bar for each file it fetches and prints the snapshot on standard output;
// generate then runs the repo from the cache with the Hub gone.
func TestPullBinary(t *testing.T) {
	cache := hubtest.Isolate(t)
	srv, commit := tinyHub(t)
	bin, err := buildArchrun()
	require.NoError(t, err)
	ptmx, tty := openPTY(t)
	var stdout bytes.Buffer
	cmd := exec.Command(bin, "pull", "org/tiny-chat", "-endpoint", srv.URL)
	cmd.Stdout, cmd.Stderr = &stdout, tty
	require.NoError(t, cmd.Start())
	var term bytes.Buffer
	var mu sync.Mutex
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			term.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("archrun pull still running after 2 minutes")
	}
	tty.Close()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	shown := term.String()
	mu.Unlock()
	snap := filepath.Join(cache, "models--org--tiny-chat", "snapshots", commit)
	assert.Equal(t, snap+"\n", stdout.String())
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		assert.Regexp(t, regexp.MustCompile(regexp.QuoteMeta(f)+` *100% \|[█ ]+\|`), shown, f)
	}
	assert.NotContains(t, shown, "fetched ", "a terminal gets bars, not lines")

	gen := exec.Command(bin, "generate", "-m", "org/tiny-chat", "-p", "hi", "-n", "2")
	gen.Env = append(os.Environ(), "HF_ENDPOINT=http://127.0.0.1:1")
	out, err := gen.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.True(t, strings.Contains(string(out), "Generation: "), "%s", out)
}
