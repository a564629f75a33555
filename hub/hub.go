// Package hub downloads models from the Hugging Face Hub into the Hugging
// Face cache, in the layout huggingface_hub and mlx-lm use, so that each
// reads what the other fetched:
//
//	HUB/models--ORG--NAME/
//	    blobs/ETAG                 a file's bytes, named by its ETag: an LFS
//	                               file's sha256, another file's git blob id
//	    snapshots/COMMIT/FILE      a relative symlink to ../../blobs/ETAG
//	    refs/REVISION              the commit a branch or tag named
//	HUB/.locks/models--ORG--NAME/ETAG.lock
//	                               held (flock) while that blob is written
//
// Download asks the Hub's API which commit a revision is and which files
// it holds (GET /api/models/ORG/NAME/revision/REVISION), then each
// file's metadata (HEAD /ORG/NAME/resolve/COMMIT/FILE): X-Repo-Commit, the
// ETag (X-Linked-Etag for an LFS file, whose answer redirects to a CDN)
// and the size (X-Linked-Size). A file is written to
// blobs/ETAG.incomplete and becomes blobs/ETAG only once its size and its
// checksum match the ETag: the sha256 of an LFS file, the git blob id
// (sha1 of "blob SIZE\x00" and the bytes) of another. A download cut off,
// in this process or an earlier one, goes on from where it stopped with a
// Range request. A file the snapshot holds is not asked for again; a blob
// the repo already holds for another commit is linked, not fetched.
// refs/REVISION is written last, once every file is in place, so that a
// ref never names a snapshot that is being filled.
//
// The environment is read as huggingface_hub reads it: HF_HUB_CACHE (see
// CacheDir), HF_ENDPOINT, HF_TOKEN (or HUGGING_FACE_HUB_TOKEN, or the
// file `hf auth login` writes: $HF_TOKEN_PATH, else $HF_HOME/token) and
// HF_HUB_OFFLINE. The token goes to the Hub alone, never to the CDN it
// redirects to.
//
// huggingface_hub (2.4, the version the tests compare with) downloads
// into a temporary name of its own (ETAG.RANDOM.incomplete) that it
// deletes when a download fails, and keeps a listing of each commit's
// files in trees/COMMIT.json; Download neither reads nor writes those, so
// a cache either fills is the same but for them.
package hub

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultEndpoint is the Hub's address when neither Options.Endpoint nor
// HF_ENDPOINT names another.
const DefaultEndpoint = "https://huggingface.co"

// Options are Download's knobs; zero fields take the defaults each names.
type Options struct {
	// Revision is a branch, a tag or a commit hash; "" is main.
	Revision string
	// Token is sent to the Hub as "Authorization: Bearer TOKEN", for
	// gated and private repos; "" takes HF_TOKEN, HUGGING_FACE_HUB_TOKEN
	// or the token file `hf auth login` writes.
	Token string
	// Endpoint is the Hub's URL; "" takes HF_ENDPOINT, else
	// DefaultEndpoint.
	Endpoint string
	// CacheDir is the Hugging Face cache; "" is CacheDir().
	CacheDir string
	// Allow and Ignore select the files by their paths in the repo, with
	// globs as huggingface_hub's allow_patterns and ignore_patterns read
	// them (Python's fnmatch: * and ? match / too, so "*.json" matches
	// "sub/a.json"; a glob ending in / names a folder): a file is fetched
	// when it matches a glob of Allow (ModelFiles when Allow is empty)
	// and none of Ignore.
	Allow, Ignore []string
	// Offline uses the cache alone, as HF_HUB_OFFLINE=1 does: the
	// snapshot the revision names is returned as it is, and nothing is
	// asked of the network.
	Offline bool
	// Progress, when set, is told how each selected file comes along, in
	// the goroutine that called Download: done bytes of total (-1 while
	// the size is unknown), from 0 to total as it downloads, or once with
	// done = total when the cache holds it.
	Progress func(file string, done, total int64)
}

// CacheDir is the Hugging Face cache's folder of repos, as huggingface_hub
// finds it: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
func CacheDir() string {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(k); d != "" {
			return d
		}
	}
	return filepath.Join(hfHome(), "hub")
}

// hfHome is huggingface_hub's HF_HOME: $HF_HOME, else
// $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
func hfHome() string {
	if d := os.Getenv("HF_HOME"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "huggingface")
	}
	return filepath.Join(home, ".cache", "huggingface")
}

// RepoFolder is the folder of a model repo in the cache:
// models--ORG--NAME.
func RepoFolder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// OfflineEnv says whether the environment asks for the cache alone:
// HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set to 1, ON, YES or TRUE.
func OfflineEnv() bool {
	for _, k := range []string{"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} {
		if v := os.Getenv(k); v != "" {
			switch strings.ToUpper(v) {
			case "1", "ON", "YES", "TRUE":
				return true
			}
			return false
		}
	}
	return false
}

// envToken is the token huggingface_hub would send: HF_TOKEN, else
// HUGGING_FACE_HUB_TOKEN, else the token file.
func envToken() string {
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := cleanToken(os.Getenv(k)); t != "" {
			return t
		}
	}
	path := os.Getenv("HF_TOKEN_PATH")
	if path == "" {
		path = filepath.Join(hfHome(), "token")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return cleanToken(string(b))
}

func cleanToken(s string) string {
	return strings.TrimSpace(strings.NewReplacer("\r", "", "\n", "").Replace(s))
}

var (
	// repoIDPattern is a Hub repo id: NAME or ORG/NAME.
	repoIDPattern = regexp.MustCompile(`^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// commitPattern is a full commit hash.
	commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)
	// etagPattern is an ETag that is safe as a file name.
	etagPattern = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._-]*$`)
)

// ParseRef splits a repo reference, ORG/NAME or ORG/NAME@REVISION, into
// the repo id and the revision ("" when it names none).
func ParseRef(ref string) (repo, revision string, err error) {
	repo, revision, at := strings.Cut(ref, "@")
	if err := checkRepo(repo); err != nil {
		return "", "", err
	}
	if at {
		if err := checkRevision(revision); err != nil {
			return "", "", fmt.Errorf("hub: %s: %w", ref, err)
		}
	}
	return repo, revision, nil
}

func checkRepo(repo string) error {
	if !repoIDPattern.MatchString(repo) || strings.Contains(repo, "--") || strings.Contains(repo, "..") || len(repo) > 96 {
		return fmt.Errorf("hub: %q is not a Hugging Face repo id: want ORG/NAME (letters, digits, '-', '_' and '.'), or ORG/NAME@REVISION", repo)
	}
	return nil
}

// checkRevision refuses a revision that could name a path outside refs/.
func checkRevision(rev string) error {
	if rev == "" || strings.ContainsAny(rev, "\\\x00\n\r\t ") || strings.HasPrefix(rev, "/") || !cleanPath(rev) {
		return fmt.Errorf("revision %q: want a branch, a tag or a commit hash", rev)
	}
	return nil
}

// cleanPath says whether p is a relative slash-separated path without
// empty, "." or ".." parts.
func cleanPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, `\`) {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

// fill applies the defaults and checks the options.
func (o *Options) fill() error {
	if o.Revision == "" {
		o.Revision = "main"
	}
	if err := checkRevision(o.Revision); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if o.Token == "" {
		o.Token = envToken()
	}
	if o.Endpoint == "" {
		o.Endpoint = os.Getenv("HF_ENDPOINT")
	}
	if o.Endpoint == "" {
		o.Endpoint = DefaultEndpoint
	}
	o.Endpoint = strings.TrimRight(o.Endpoint, "/")
	if u, err := url.Parse(o.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("hub: endpoint %q: want the Hub's http or https URL, such as %s", o.Endpoint, DefaultEndpoint)
	}
	if o.CacheDir == "" {
		o.CacheDir = CacheDir()
	}
	if !o.Offline {
		o.Offline = OfflineEnv()
	}
	return nil
}

// Download fetches the files of a model repo (ORG/NAME) at
// Options.Revision into the Hugging Face cache and returns the snapshot
// folder that holds them, snapshots/COMMIT. Files already in the cache
// are not fetched again; offline, the cache alone answers. Errors name
// the repo, the file and the HTTP status, and say what to do about a
// gated repo (HF_TOKEN), a missing one and a damaged download.
func Download(ctx context.Context, repo string, opts Options) (string, error) {
	if err := checkRepo(repo); err != nil {
		return "", err
	}
	if err := opts.fill(); err != nil {
		return "", err
	}
	d := newDownload(ctx, repo, opts)
	if opts.Offline {
		return d.cached()
	}
	return d.run()
}
