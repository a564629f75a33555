package hub_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
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
	"github.com/archgen/archgen/internal/tinychat"
)

// tinyFiles are the files of the tiny chat checkpoint (internal/tinychat)
// with what a Hub repo holds beside them: a README, .gitattributes and a
// file in a folder.
func tinyFiles(t *testing.T) map[string][]byte {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, tinychat.Write(dir, nil, map[string]any{"eos_token_id": []int{tinychat.EndOfText, tinychat.IMEnd}}))
	files := hubtest.Files(t, dir)
	files["README.md"] = []byte("# tiny-chat\n\nA tiny llama for tests.\n")
	files[".gitattributes"] = []byte("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
	files["original/params.json"] = []byte(`{"dim": 64}`)
	files["chat_template.jinja"] = []byte(tinychat.Template)
	files["consolidated.safetensors"] = []byte("not the model's shards")
	return files
}

// modelFiles are the names of files Download fetches by default.
var modelFiles = []string{"chat_template.jinja", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}

// entry is one thing in a cache folder: a directory, a symlink's target
// or a file's sha256, with its permissions.
type entry struct {
	Kind, Value string
	Perm        fs.FileMode
}

// tree lists a cache's folder of the repo and its locks, leaving out
// huggingface_hub's listings of commits (trees/).
func tree(t *testing.T, cache, repo string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	for _, root := range []string{hub.RepoFolder(repo), filepath.Join(".locks", hub.RepoFolder(repo))} {
		base := filepath.Join(cache, root)
		err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(cache, p)
			if strings.HasPrefix(rel, filepath.Join(hub.RepoFolder(repo), "trees")) {
				return filepath.SkipDir
			}
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				require.NoError(t, err)
				out[rel] = entry{Kind: "symlink", Value: target}
			case d.IsDir():
				info, err := d.Info()
				require.NoError(t, err)
				out[rel] = entry{Kind: "dir", Perm: info.Mode().Perm()}
			default:
				b, err := os.ReadFile(p)
				require.NoError(t, err)
				sum := sha256.Sum256(b)
				info, err := d.Info()
				require.NoError(t, err)
				out[rel] = entry{"file", hex.EncodeToString(sum[:]), info.Mode().Perm()}
			}
			return nil
		})
		require.NoError(t, err)
	}
	return out
}

// python is the project venv's interpreter (make setup-py).
func python(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../.deps/py/bin/python")
	require.NoError(t, err)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	return p
}

// snapshotDownload runs huggingface_hub's own snapshot_download with args
// (keyword arguments) and returns the folder it returns.
func snapshotDownload(t *testing.T, repo string, args map[string]any, env ...string) (string, error) {
	t.Helper()
	a, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.Command(python(t), "-c", `
import json, sys
from huggingface_hub import snapshot_download
print(snapshot_download(sys.argv[1], **json.loads(sys.argv[2])))
`, repo, string(a))
	var clean []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HF_") && !strings.HasPrefix(kv, "HUGGING") {
			clean = append(clean, kv)
		}
	}
	cmd.Env = append(clean, append([]string{"HF_HOME=" + t.TempDir(), "HF_HUB_DISABLE_TELEMETRY=1",
		"HF_HUB_DISABLE_PROGRESS_BARS=1", "HF_HUB_DISABLE_XET=1"}, env...)...)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", errors.New(string(exit.Stderr))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// TestDownloadMatchesHuggingFaceHub: Download and huggingface_hub's
// snapshot_download, from the same server into caches of their own, make
// the same trees: the same blobs (named by ETag, the same bytes), the
// same relative symlinks in snapshots/COMMIT, the same refs/main and the
// same lock files; each then reads the other's cache offline.
func TestDownloadMatchesHuggingFaceHub(t *testing.T) {
	hubtest.Isolate(t)
	srv := hubtest.New(t)
	files := tinyFiles(t)
	commit := srv.Add("org/tiny-chat", "main", files)
	for _, c := range []struct {
		name   string
		allow  []string
		hfArgs map[string]any
		want   []string
	}{
		{"model files", nil, map[string]any{"allow_patterns": hub.ModelFiles}, modelFiles},
		{"every file", []string{"*"}, map[string]any{}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ours, theirs := t.TempDir(), t.TempDir()
			snap, err := hub.Download(context.Background(), "org/tiny-chat", hub.Options{Endpoint: srv.URL, CacheDir: ours, Allow: c.allow})
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(ours, "models--org--tiny-chat", "snapshots", commit), snap)
			args := map[string]any{"revision": "main", "cache_dir": theirs, "endpoint": srv.URL}
			for k, v := range c.hfArgs {
				args[k] = v
			}
			hfSnap, err := snapshotDownload(t, "org/tiny-chat", args)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(theirs, "models--org--tiny-chat", "snapshots", commit), hfSnap)

			got, want := tree(t, ours, "org/tiny-chat"), tree(t, theirs, "org/tiny-chat")
			assert.Equal(t, want, got)
			ref := filepath.Join("models--org--tiny-chat", "refs", "main")
			assert.Contains(t, got, ref)
			b, err := os.ReadFile(filepath.Join(ours, ref))
			require.NoError(t, err)
			assert.Equal(t, commit, string(b))
			wantFiles := c.want
			if wantFiles == nil {
				for n := range files {
					wantFiles = append(wantFiles, n)
				}
			}
			var names []string
			require.NoError(t, filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(snap, p)
					names = append(names, filepath.ToSlash(rel))
					b, err := os.ReadFile(p)
					require.NoError(t, err)
					assert.Equal(t, files[filepath.ToSlash(rel)], b, rel)
				}
				return err
			}))
			sort.Strings(names)
			sort.Strings(wantFiles)
			assert.Equal(t, wantFiles, names)

			// Each reads the other's cache, offline.
			offline, err := snapshotDownload(t, "org/tiny-chat", map[string]any{"cache_dir": ours}, "HF_HUB_OFFLINE=1")
			require.NoError(t, err)
			assert.Equal(t, snap, offline)
			offline, err = hub.Download(context.Background(), "org/tiny-chat", hub.Options{CacheDir: theirs, Offline: true})
			require.NoError(t, err)
			assert.Equal(t, hfSnap, offline)
		})
	}
}
