package hub_test

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/hub"
	"github.com/archgen/archgen/hub/hubtest"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fetched are the files whose bytes were asked for (GET), by their path
// on the Hub or the CDN's file parameter, with the Range asked.
func fetched(reqs []hubtest.Request) []string {
	var out []string
	for _, r := range reqs {
		if r.Method != "GET" || strings.HasPrefix(r.Path, "/api/") {
			continue
		}
		name := r.Path
		if r.CDN {
			u, err := url.Parse(r.Path)
			if err != nil {
				panic(err)
			}
			name = u.Query().Get("file")
		} else if i := strings.Index(r.Path, "/resolve/"); i >= 0 {
			name = r.Path[i+len("/resolve/")+41:]
		}
		if r.Range != "" {
			name += " " + r.Range
		}
		out = append(out, name)
	}
	return out
}

// TestDownloadResume: a connection dropped halfway through a file is
// taken up again with a Range request from where it stopped; a partial
// blob an earlier run left (blobs/ETAG.incomplete) is continued the same
// way. The file comes whole and checked, and no partial file is left.
func TestDownloadResume(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	files := tinyFiles(t)
	srv.Add("org/tiny-chat", "main", files)
	weights := files["model.safetensors"]
	half := len(weights) / 2

	t.Run("cut connection", func(t *testing.T) {
		cache := t.TempDir()
		srv.CutOnce("org/tiny-chat", "model.safetensors")
		before := len(srv.Requests())
		snap, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(snap, "model.safetensors"))
		require.NoError(t, err)
		assert.Equal(t, weights, got)
		assert.Equal(t, []string{"model.safetensors", fmt.Sprintf("model.safetensors bytes=%d-", half)},
			filter(fetched(srv.Requests()[before:]), "model.safetensors"))
		assert.NoFileExists(t, filepath.Join(cache, "models--org--tiny-chat", "blobs", sha(weights)+".incomplete"))
	})

	t.Run("cancelled, then run again", func(t *testing.T) {
		cache := t.TempDir()
		srv.CutOnce("org/tiny-chat", "model.safetensors")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := hub.Download(ctx, "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache,
			Progress: func(file string, done, total int64) {
				if file == "model.safetensors" && done > 0 {
					cancel() // as Ctrl-C would, while the file comes
				}
			}})
		require.ErrorIs(t, err, context.Canceled)
		part := filepath.Join(cache, "models--org--tiny-chat", "blobs", sha(weights)+".incomplete")
		st, err := os.Stat(part)
		require.NoError(t, err, "the partial file stays")
		kept := st.Size()
		assert.True(t, kept > 0 && kept <= int64(half), "%d bytes kept", kept)
		assert.NoFileExists(t, filepath.Join(cache, "models--org--tiny-chat", "refs", "main"))
		before := len(srv.Requests())
		snap, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(snap, "model.safetensors"))
		require.NoError(t, err)
		assert.Equal(t, weights, got)
		assert.Equal(t, []string{fmt.Sprintf("model.safetensors bytes=%d-", kept)}, filter(fetched(srv.Requests()[before:]), "model.safetensors"))
	})

	t.Run("partial file of an earlier run", func(t *testing.T) {
		cache := t.TempDir()
		blobs := filepath.Join(cache, "models--org--tiny-chat", "blobs")
		require.NoError(t, os.MkdirAll(blobs, 0o755))
		part := filepath.Join(blobs, sha(weights)+".incomplete")
		require.NoError(t, os.WriteFile(part, weights[:half], 0o644))
		before := len(srv.Requests())
		var seen [][2]int64
		snap, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache,
			Progress: func(file string, done, total int64) {
				if file == "model.safetensors" {
					seen = append(seen, [2]int64{done, total})
				}
			}})
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(snap, "model.safetensors"))
		require.NoError(t, err)
		assert.Equal(t, weights, got)
		assert.Equal(t, []string{fmt.Sprintf("model.safetensors bytes=%d-", half)}, filter(fetched(srv.Requests()[before:]), "model.safetensors"))
		assert.NoFileExists(t, part)
		require.NotEmpty(t, seen)
		assert.Equal(t, [2]int64{int64(half), int64(len(weights))}, seen[0], "progress starts at what the partial file holds")
		assert.Equal(t, [2]int64{int64(len(weights)), int64(len(weights))}, seen[len(seen)-1])
	})
}

func filter(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// TestDownloadChecksum: bytes that do not match the ETag, an LFS file's
// sha256 or another file's git blob id, are refused with the file named;
// nothing of them stays in the cache (no blob, no partial file, no
// snapshot entry, no ref), and the next download, of right bytes, works.
func TestDownloadChecksum(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	files := tinyFiles(t)
	commit := srv.Add("org/tiny-chat", "main", files)
	for _, c := range []struct{ file, kind, etag string }{
		{"model.safetensors", "sha256", sha(files["model.safetensors"])},
		{"tokenizer.json", "git blob id", gitBlobID(files["tokenizer.json"])},
	} {
		t.Run(c.file, func(t *testing.T) {
			cache := t.TempDir()
			srv.Corrupt("org/tiny-chat", c.file, true)
			_, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
			srv.Corrupt("org/tiny-chat", c.file, false)
			bad := append([]byte(nil), files[c.file]...)
			bad[len(bad)/2] ^= 0xff
			gotSum := sha(bad)
			if c.kind != "sha256" {
				gotSum = gitBlobID(bad)
			}
			require.EqualError(t, err, fmt.Sprintf("hub: org/tiny-chat@main: %s: the download's %s is %s, the Hub's ETag says %s: the bytes were damaged on the way; they are removed, download again",
				c.file, c.kind, gotSum, c.etag))
			repo := filepath.Join(cache, "models--org--tiny-chat")
			assert.NoFileExists(t, filepath.Join(repo, "blobs", c.etag))
			assert.NoFileExists(t, filepath.Join(repo, "blobs", c.etag+".incomplete"))
			assert.NoFileExists(t, filepath.Join(repo, "snapshots", commit, c.file))
			assert.NoFileExists(t, filepath.Join(repo, "refs", "main"))

			snap, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
			require.NoError(t, err)
			got, err := os.ReadFile(filepath.Join(snap, c.file))
			require.NoError(t, err)
			assert.Equal(t, files[c.file], got)
		})
	}
}

func gitBlobID(b []byte) string {
	h := sha1.Sum(append([]byte(fmt.Sprintf("blob %d\x00", len(b))), b...))
	return hex.EncodeToString(h[:])
}

// TestDownloadConcurrent: downloads of one repo into one cache at once
// (each holding the blob's lock while it writes it) all succeed, with one
// copy of each blob and no partial file left.
func TestDownloadConcurrent(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	files := tinyFiles(t)
	srv.Add("org/tiny-chat", "main", files)
	cache := t.TempDir()
	errs := make(chan error, 4)
	snaps := make(chan string, 4)
	for range 4 {
		go func() {
			snap, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
			snaps <- snap
			errs <- err
		}()
	}
	for range 4 {
		require.NoError(t, <-errs)
		snap := <-snaps
		b, err := os.ReadFile(filepath.Join(snap, "model.safetensors"))
		require.NoError(t, err)
		assert.Equal(t, files["model.safetensors"], b)
	}
	blobs, err := os.ReadDir(filepath.Join(cache, "models--org--tiny-chat", "blobs"))
	require.NoError(t, err)
	assert.Len(t, blobs, len(modelFiles))
	for _, b := range blobs {
		assert.False(t, strings.HasSuffix(b.Name(), ".incomplete"), b.Name())
	}
}

// TestDownloadToken: a gated repo refuses a download without a token (401)
// and with another token (403), each error saying what to do; HF_TOKEN (or
// Options.Token) is sent to the Hub as a bearer token and never to the CDN
// its LFS files redirect to.
func TestDownloadToken(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	srv.Add("org/gated", "main", tinyFiles(t))
	srv.Gate("org/gated")
	cache := t.TempDir()
	_, err := hub.Download(context.Background(), "org/gated", hub.Options{Endpoint: srv.URL, CacheDir: cache})
	assert.EqualError(t, err, "hub: org/gated@main: GET "+srv.URL+"/api/models/org/gated/revision/main: 401 Unauthorized: a gated repo: accept its conditions at "+srv.URL+"/org/gated, then set HF_TOKEN to an access token of that account"+
		` (the Hub: "Access to model org/gated is restricted. You must have access to it and be authenticated to access it. Please log in.")`)
	var he *hub.HTTPError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, 401, he.Status)
	assert.Equal(t, "GatedRepo", he.Code)

	_, err = hub.Download(context.Background(), "org/gated", hub.Options{Endpoint: srv.URL, CacheDir: cache, Token: "hf_other"})
	assert.EqualError(t, err, "hub: org/gated@main: GET "+srv.URL+"/api/models/org/gated/revision/main: 403 Forbidden: a gated repo, which the token given (HF_TOKEN) may not read yet: accept its conditions at "+srv.URL+"/org/gated with that account, or use another token"+
		` (the Hub: "Access to model org/gated is restricted and you are not in the authorized list. Visit `+srv.URL+`/org/gated to ask for access.")`)

	t.Setenv("HF_TOKEN", srv.Token)
	before := len(srv.Requests())
	snap, err := hub.Download(context.Background(), "org/gated", hub.Options{Endpoint: srv.URL, CacheDir: cache})
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(snap, "model.safetensors"))
	var hubReqs, cdnReqs int
	for _, r := range srv.Requests()[before:] {
		if r.CDN {
			cdnReqs++
			assert.Empty(t, r.Authorization, "the token went to the CDN: %s", r.Path)
		} else {
			hubReqs++
			assert.Equal(t, "Bearer "+srv.Token, r.Authorization, r.Path)
		}
	}
	assert.Positive(t, hubReqs)
	assert.Equal(t, 1, cdnReqs, "model.safetensors, from the CDN")

	// A token from the file `hf auth login` writes.
	t.Setenv("HF_TOKEN", "")
	require.NoError(t, os.WriteFile(filepath.Join(os.Getenv("HF_HOME"), "token"), []byte(srv.Token+"\n"), 0o600))
	_, err = hub.Download(context.Background(), "org/gated", hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir()})
	require.NoError(t, err)
}

// TestDownloadNotFound: a repo the Hub does not have, a revision it does
// not have, each a 404 error that says which.
func TestDownloadNotFound(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	srv.Add("org/tiny-chat", "main", tinyFiles(t))
	cache := t.TempDir()
	_, err := hub.Download(context.Background(), "org/absent", hub.Options{Endpoint: srv.URL, CacheDir: cache})
	assert.EqualError(t, err, "hub: org/absent@main: GET "+srv.URL+`/api/models/org/absent/revision/main: 404 Not Found: no such repo or revision on the Hub (check the repo id and the revision) (the Hub: "Repository not found")`)
	_, err = hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache, Revision: "refs/pr/9"})
	assert.EqualError(t, err, "hub: org/tiny-chat@refs/pr/9: GET "+srv.URL+`/api/models/org/tiny-chat/revision/refs%2Fpr%2F9: 404 Not Found: the repo has no revision "refs/pr/9" (a branch, a tag or a commit hash) (the Hub: "Invalid rev id: refs/pr/9")`)
	_, err = os.Stat(filepath.Join(cache, "models--org--absent"))
	assert.True(t, os.IsNotExist(err), "a failed download leaves no folder")

	// No server there at all.
	_, err = hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: "http://127.0.0.1:1", CacheDir: cache})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hub: org/tiny-chat@main: cannot reach the Hub (http://127.0.0.1:1): ")
	assert.Contains(t, err.Error(), "(HF_HUB_OFFLINE=1 uses the cache alone)")
}

// TestDownloadOffline: with HF_HUB_OFFLINE=1 (or Options.Offline) the
// cache alone answers: a repo it lacks is an error that says so, one it
// holds comes back without a request.
func TestDownloadOffline(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	commit := srv.Add("org/tiny-chat", "main", tinyFiles(t))
	cache := t.TempDir()
	t.Setenv("HF_HUB_OFFLINE", "1")
	_, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
	assert.EqualError(t, err, "hub: org/tiny-chat@main: offline (HF_HUB_OFFLINE), and the Hugging Face cache ("+cache+") does not hold it: unset HF_HUB_OFFLINE to download it")
	assert.Empty(t, srv.Requests())

	t.Setenv("HF_HUB_OFFLINE", "")
	snap, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
	require.NoError(t, err)
	n := len(srv.Requests())
	t.Setenv("HF_HUB_OFFLINE", "true")
	for _, rev := range []string{"", "main", commit} {
		got, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache, Revision: rev})
		require.NoError(t, err, rev)
		assert.Equal(t, snap, got)
	}
	t.Setenv("HF_HUB_OFFLINE", "")
	got, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache, Offline: true})
	require.NoError(t, err)
	assert.Equal(t, snap, got)
	assert.Len(t, srv.Requests(), n, "offline, nothing is asked of the network")
	_, err = hub.Download(context.Background(), "org/tiny-chat", hub.Options{CacheDir: cache, Offline: true, Revision: "v2"})
	assert.EqualError(t, err, "hub: org/tiny-chat@v2: offline (HF_HUB_OFFLINE), and the Hugging Face cache ("+cache+") does not hold it: unset HF_HUB_OFFLINE to download it")
}

// TestDownloadPatterns: Allow and Ignore select files as huggingface_hub's
// allow_patterns and ignore_patterns do; GGUF files come only when asked
// for; patterns that select nothing are an error listing the files.
func TestDownloadPatterns(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	files := tinyFiles(t)
	srv.Add("org/tiny-chat", "main", files)
	srv.Add("org/tiny-gguf", "main", map[string][]byte{
		"tiny.Q4_K_M.gguf": []byte("GGUF q4"), "tiny.Q8_0.gguf": []byte("GGUF q8"), "README.md": []byte("# gguf\n"),
	})
	list := func(snap string) []string {
		var out []string
		filepath.Walk(snap, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				rel, _ := filepath.Rel(snap, p)
				out = append(out, filepath.ToSlash(rel))
			}
			return nil
		})
		sort.Strings(out)
		return out
	}
	for _, c := range []struct {
		repo          string
		allow, ignore []string
		want          []string
	}{
		{"org/tiny-chat", nil, []string{"*.safetensors"}, []string{"chat_template.jinja", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}},
		{"org/tiny-chat", []string{"*.json"}, []string{"tokenizer*"}, []string{"config.json", "generation_config.json", "original/params.json"}},
		{"org/tiny-chat", []string{"original/"}, nil, []string{"original/params.json"}},
		{"org/tiny-chat", []string{"[cg]*.json", "READM?.md"}, nil, []string{"README.md", "config.json", "generation_config.json"}},
		{"org/tiny-gguf", []string{"*Q4_K_M.gguf"}, nil, []string{"tiny.Q4_K_M.gguf"}},
	} {
		snap, err := hub.Download(context.Background(), c.repo, hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir(), Allow: c.allow, Ignore: c.ignore})
		require.NoError(t, err, "%v %v", c.allow, c.ignore)
		assert.Equal(t, c.want, list(snap), "%v %v", c.allow, c.ignore)
	}
	_, err := hub.Download(context.Background(), "org/tiny-gguf", hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir()})
	assert.EqualError(t, err, "hub: org/tiny-gguf@main: none of its 3 files (README.md, tiny.Q4_K_M.gguf, tiny.Q8_0.gguf) matches the patterns "+
		strings.Join(hub.ModelFiles, " ")+`: a GGUF repo: pass a pattern that names the .gguf file to fetch, such as "*Q4_K_M.gguf"`)
	_, err = hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir(), Allow: []string{"*.json"}, Ignore: []string{"*"}})
	assert.EqualError(t, err, "hub: org/tiny-chat@main: none of its 10 files (.gitattributes, README.md, chat_template.jinja, config.json, consolidated.safetensors, generation_config.json, model.safetensors, original/params.json, and 2 more) matches the patterns *.json less *: pass patterns that match the files to fetch")
}

// TestPatternsMatchFnmatch: the globs mean what Python's fnmatchcase
// makes of them, which huggingface_hub's patterns are.
func TestPatternsMatchFnmatch(t *testing.T) {
	globs := []string{"*", "*.json", "model*.safetensors", "original/", "[cg]*.json", "[!c]*", "READM?.md", "a[", "[]x]*",
		"*[0-9]-of-*", "sub/*.bin", "*.JSON", "[a-c-]x", "*.[ch]", `\*`, "(x)", "a+b", "ü*"}
	names := []string{"config.json", "sub/config.json", "model.safetensors", "model-00001-of-00002.safetensors",
		"consolidated.safetensors", "original/params.json", "README.md", "a[", "]x", "x]", "sub/dir/x.bin", "CONFIG.JSON",
		"-x", "bx", "m.c", "m.h", "*", "(x)", "a+b", "über", ".gitattributes"}
	var want [][]bool
	b, err := json.Marshal([]any{globs, names})
	require.NoError(t, err)
	out, err := exec.Command(python(t), "-c", `
import json, sys
from huggingface_hub.utils import filter_repo_objects
globs, names = json.loads(sys.argv[1])
print(json.dumps([[bool(list(filter_repo_objects([n], allow_patterns=[g]))) for n in names] for g in globs]))
`, string(b)).Output()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &want))
	for i, g := range globs {
		for j, n := range names {
			assert.Equal(t, want[i][j], hub.Match(g, n), "glob %q, name %q", g, n)
		}
	}
}

// TestDownloadCachedFiles: a revision the cache holds costs one request
// (the revision's listing); a new commit fetches only the files that
// changed, links the blobs it shares with the cached one, and moves
// refs/main. A tag is recorded under refs/ too; a commit hash is not.
func TestDownloadCachedFiles(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	files := tinyFiles(t)
	first := srv.Add("org/tiny-chat", "main", files)
	cache := t.TempDir()
	snap1, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
	require.NoError(t, err)
	n := len(srv.Requests())
	var progress []string
	_, err = hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache,
		Progress: func(file string, done, total int64) {
			progress = append(progress, fmt.Sprintf("%s %d/%d", file, done, total))
		}})
	require.NoError(t, err)
	assert.Len(t, srv.Requests(), n+1)
	assert.Contains(t, progress, fmt.Sprintf("model.safetensors %d/%d", len(files["model.safetensors"]), len(files["model.safetensors"])))
	assert.Len(t, progress, len(modelFiles))

	changed := map[string][]byte{}
	for k, v := range files {
		changed[k] = v
	}
	changed["config.json"] = append([]byte(nil), files["config.json"]...)
	changed["config.json"] = []byte(strings.Replace(string(changed["config.json"]), "{", `{"note": "v2", `, 1))
	second := srv.Add("org/tiny-chat", "main", changed)
	srv.Add("org/tiny-chat", "v1", files)
	n = len(srv.Requests())
	snap2, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(cache, "models--org--tiny-chat", "snapshots", second), snap2)
	assert.Equal(t, []string{"config.json"}, fetched(srv.Requests()[n:]))
	ref, err := os.ReadFile(filepath.Join(cache, "models--org--tiny-chat", "refs", "main"))
	require.NoError(t, err)
	assert.Equal(t, second, string(ref))
	target, err := os.Readlink(filepath.Join(snap2, "model.safetensors"))
	require.NoError(t, err)
	assert.Equal(t, "../../blobs/"+sha(files["model.safetensors"]), target)
	_, err = os.Stat(filepath.Join(snap1, "config.json"))
	assert.NoError(t, err, "the first snapshot stays whole")

	// A commit hash names its snapshot, and no ref; a tag gets one.
	tagged, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache, Revision: "v1"})
	require.NoError(t, err)
	assert.NotEqual(t, snap1, tagged, "v1 is a commit of its own")
	_, err = hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: cache, Revision: first})
	require.NoError(t, err)
	refs, err := os.ReadDir(filepath.Join(cache, "models--org--tiny-chat", "refs"))
	require.NoError(t, err)
	var names []string
	for _, r := range refs {
		names = append(names, r.Name())
	}
	assert.Equal(t, []string{"main", "v1"}, names)
}

// TestDownloadInputErrors: a repo id, revision or endpoint Download cannot
// use is refused before any request.
func TestDownloadInputErrors(t *testing.T) {
	hubtest.Isolate(t)
	for _, c := range []struct {
		repo string
		opts hub.Options
		want string
	}{
		{"not a repo", hub.Options{}, `hub: "not a repo" is not a Hugging Face repo id: want ORG/NAME (letters, digits, '-', '_' and '.'), or ORG/NAME@REVISION`},
		{"org/a--b", hub.Options{}, `hub: "org/a--b" is not a Hugging Face repo id: want ORG/NAME (letters, digits, '-', '_' and '.'), or ORG/NAME@REVISION`},
		{"../etc", hub.Options{}, `hub: "../etc" is not a Hugging Face repo id: want ORG/NAME (letters, digits, '-', '_' and '.'), or ORG/NAME@REVISION`},
		{"org/x", hub.Options{Revision: "../../x"}, `hub: revision "../../x": want a branch, a tag or a commit hash`},
		{"org/x", hub.Options{Endpoint: "huggingface.co"}, `hub: endpoint "huggingface.co": want the Hub's http or https URL, such as https://huggingface.co`},
	} {
		_, err := hub.Download(context.Background(), c.repo, c.opts)
		assert.EqualError(t, err, c.want)
	}
	repo, rev, err := hub.ParseRef("org/x@refs/pr/1")
	require.NoError(t, err)
	assert.Equal(t, [2]string{"org/x", "refs/pr/1"}, [2]string{repo, rev})
	_, _, err = hub.ParseRef("org/x@")
	assert.EqualError(t, err, `hub: org/x@: revision "": want a branch, a tag or a commit hash`)
}

// TestDownloadFailures: a status that may pass (5xx) is retried, for the
// metadata and for the bytes; one that will not (404, 403), or a 5xx past
// the retries, is an error naming the file, the request and the status.
func TestDownloadFailures(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	files := tinyFiles(t)
	commit := srv.Add("org/tiny-chat", "main", files)
	head := func(reqs []hubtest.Request, file string) (n int) {
		for _, r := range reqs {
			if r.Method == "HEAD" && strings.HasSuffix(r.Path, "/"+file) {
				n++
			}
		}
		return n
	}

	srv.FailNext("org/tiny-chat", "model.safetensors", 503, 502)
	srv.FailNext("org/tiny-chat", "tokenizer.json", 0, 500, 503)
	before := len(srv.Requests())
	snap, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir()})
	require.NoError(t, err)
	reqs := srv.Requests()[before:]
	assert.Equal(t, 3, head(reqs, "model.safetensors"))
	assert.Equal(t, []string{"tokenizer.json", "tokenizer.json", "tokenizer.json"}, filter(fetched(reqs), "tokenizer.json"))
	for _, f := range []string{"model.safetensors", "tokenizer.json"} {
		b, err := os.ReadFile(filepath.Join(snap, f))
		require.NoError(t, err)
		assert.Equal(t, files[f], b)
	}

	fileURL := srv.URL + "/org/tiny-chat/resolve/" + commit + "/"
	cdnURL := srv.CDN + "/cdn/" + sha(files["model.safetensors"]) + "?file=model.safetensors&repo=org%2Ftiny-chat"
	for _, c := range []struct {
		file     string
		statuses []int
		want     string
	}{
		{"tokenizer.json", []int{404}, "hub: org/tiny-chat@main: tokenizer.json: HEAD " + fileURL + "tokenizer.json: 404 Not Found: no such file at this revision (the Hub: \"Not Found\")"},
		{"model.safetensors", []int{0, 403}, "hub: org/tiny-chat@main: model.safetensors: GET " + cdnURL + `: 403 Forbidden: the CDN the Hub sent the download to refused it (its signed address may have expired): download again (the Hub: "Forbidden")`},
		{"config.json", []int{0, 503, 503, 503, 503, 503, 503}, "hub: org/tiny-chat@main: config.json: GET " + fileURL + `config.json: 503 Service Unavailable: the Hub failed: retry later (the Hub: "Service Unavailable")`},
	} {
		srv.FailNext("org/tiny-chat", c.file, c.statuses...)
		_, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir()})
		assert.EqualError(t, err, c.want)
		srv.FailNext("org/tiny-chat", c.file) // nothing left over
	}
}

// TestDownloadNotAHub: an endpoint that does not answer as the Hub does
// (no JSON, no commit hash, a file list that leaves the repo) is refused
// with what it got.
func TestDownloadNotAHub(t *testing.T) {
	hubtest.Isolate(t)
	var answer string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(answer))
	}))
	defer srv.Close()
	u := srv.URL + "/api/models/org/x/revision/main"
	for _, c := range []struct{ answer, want string }{
		{"<html>hello</html>", "hub: org/x@main: GET " + u + ": not the Hub's JSON (invalid character '<' looking for beginning of value): is the endpoint (HF_ENDPOINT) a Hugging Face Hub?"},
		{`{"sha": "../../x"}`, "hub: org/x@main: GET " + u + `: the answer's sha "../../x" is not a commit hash: is the endpoint (HF_ENDPOINT) a Hugging Face Hub?`},
		{`{"sha": "` + strings.Repeat("ab", 20) + `", "siblings": [{"rfilename": "../../evil"}]}`, `hub: org/x@main: the Hub lists the file "../../evil", a path outside the repo: refused`},
		{`{"sha": "` + strings.Repeat("ab", 20) + `", "siblings": [{"rfilename": "config.json"}]}`, "hub: org/x@main: config.json: HEAD " + srv.URL + "/org/x/resolve/" + strings.Repeat("ab", 20) + "/config.json: the answer has no X-Repo-Commit header: is the endpoint (HF_ENDPOINT) a Hugging Face Hub?"},
	} {
		answer = c.answer
		_, err := hub.Download(context.Background(), "org/x", hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir()})
		assert.EqualError(t, err, c.want)
	}
}
