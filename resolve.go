package archgen

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/archgen/archgen/hub"
)

// Kind is what a path given to Load names.
type Kind string

const (
	KindDir  Kind = "dir"  // a model directory (config.json, safetensors, tokenizer files)
	KindGGUF Kind = "gguf" // a llama.cpp GGUF file
)

// Resolved is a path given to Load, resolved to what it names on disk.
type Resolved struct {
	Kind Kind
	// Path is the model directory or the GGUF file.
	Path string
}

// modelDirHolds says what a model directory must hold, for errors.
const modelDirHolds = "a model directory holds config.json, the weights " +
	"(model.safetensors, or model-*-of-*.safetensors with model.safetensors.index.json) " +
	"and tokenizer.json (with tokenizer_config.json)"

// repoID is a Hugging Face repo id, ORG/NAME, with a revision or not:
// ORG/NAME@REVISION.
var repoID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[^@\s]+)?$`)

// HubCache is the folder of the Hugging Face cache that holds models, as
// huggingface_hub finds it: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE,
// else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub (hub.CacheDir).
func HubCache() string { return hub.CacheDir() }

// notCached is the error of a repo the cache lacks, or holds in part (a
// download cut short): Load with LoadOptions.Download fetches it.
type notCached struct{ error }

func (e notCached) Unwrap() error { return e.error }

// Resolve finds what path names, without reading any weights:
//
//   - a GGUF file (by its name or its magic bytes);
//   - a model directory, holding config.json;
//   - a Hugging Face cache folder, models--ORG--NAME or its snapshots/
//     folder: the snapshot refs/main names (or the only snapshot there is);
//   - a repo id, ORG/NAME, that is no path on disk: that repo's folder in
//     the Hugging Face cache (HubCache), resolved the same way; and
//     ORG/NAME@REVISION, the snapshot refs/REVISION names (or
//     snapshots/REVISION, for a commit hash). Nothing is downloaded
//     (Load downloads, with LoadOptions.Download).
//
// Anything else is an error that says what to pass instead.
func Resolve(path string) (Resolved, error) { return resolve(path, HubCache()) }

// isRepoRef says whether path is a repo id rather than a path: it looks
// like one and names nothing on disk.
func isRepoRef(path string) bool {
	if !repoID.MatchString(path) || strings.HasPrefix(path, ".") {
		return false
	}
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// resolve is Resolve, reading repo ids from the cache folder hubDir.
func resolve(path, hubDir string) (Resolved, error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && repoID.MatchString(path) && !strings.HasPrefix(path, ".") {
			return resolveRepo(path, hubDir)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return Resolved{}, fmt.Errorf("%s: no such file or directory: pass a model directory, a .gguf file or a Hugging Face repo id (ORG/NAME)", path)
		}
		return Resolved{}, err
	}
	if !st.IsDir() {
		if isGGUF(path) {
			return Resolved{KindGGUF, path}, nil
		}
		return Resolved{}, fmt.Errorf("%s: a file, but not a GGUF file: pass a model directory (%s) or a .gguf file", path, modelDirHolds)
	}
	if exists(filepath.Join(path, "config.json")) {
		return Resolved{KindDir, path}, nil
	}
	clean := filepath.Clean(path)
	switch base := filepath.Base(clean); {
	case strings.HasPrefix(base, "models--"):
		return resolveCacheFolder(clean)
	case base == "snapshots" && strings.HasPrefix(filepath.Base(filepath.Dir(clean)), "models--"):
		return resolveCacheFolder(filepath.Dir(clean))
	case base == "refs" && strings.HasPrefix(filepath.Base(filepath.Dir(clean)), "models--"):
		return resolveCacheFolder(filepath.Dir(clean))
	}
	if repos, _ := filepath.Glob(filepath.Join(path, "models--*")); len(repos) > 0 {
		names := make([]string, len(repos))
		for i, r := range repos {
			names[i] = repoName(filepath.Base(r))
		}
		return Resolved{}, fmt.Errorf("%s is a Hugging Face cache, not a model: pass a repo id (%s) or one of its models--ORG--NAME folders",
			path, strings.Join(names, ", "))
	}
	if ggufs, _ := filepath.Glob(filepath.Join(path, "*.gguf")); len(ggufs) > 0 {
		return Resolved{}, fmt.Errorf("%s has no config.json but holds %s: pass the .gguf file itself", path, filepath.Base(ggufs[0]))
	}
	return Resolved{}, fmt.Errorf("%s has no config.json: %s", path, modelDirHolds)
}

// resolveRepo finds a repo id, ORG/NAME or ORG/NAME@REVISION, in the
// Hugging Face cache folder hubDir.
func resolveRepo(ref, hubDir string) (Resolved, error) {
	id, rev, _ := strings.Cut(ref, "@")
	dir := filepath.Join(hubDir, hub.RepoFolder(id))
	fetch := "hf download " + id
	if rev != "" {
		fetch += " --revision " + rev
	}
	if !exists(dir) {
		return Resolved{}, notCached{fmt.Errorf("%s is neither a path nor a repo in the Hugging Face cache (%s): archgen reads the cache but does not download; fetch it first (%s)", ref, hubDir, fetch)}
	}
	if rev == "" {
		return resolveCacheFolder(dir)
	}
	snap := filepath.Join(dir, "snapshots", rev)
	if b, err := os.ReadFile(filepath.Join(dir, "refs", filepath.FromSlash(rev))); err == nil && !strings.Contains(rev, "..") {
		snap = filepath.Join(dir, "snapshots", strings.TrimSpace(string(b)))
	}
	if strings.Contains(rev, "..") || !exists(snap) {
		return Resolved{}, notCached{fmt.Errorf("%s: the Hugging Face cache holds %s but not its revision %s (no refs/%s nor snapshots/%s in %s): fetch it first (%s)", ref, id, rev, rev, rev, dir, fetch)}
	}
	return resolveSnapshot(snap)
}

// resolveCacheFolder is the snapshot of a models--ORG--NAME folder that
// refs/main names, or its only snapshot.
func resolveCacheFolder(dir string) (Resolved, error) {
	snaps := filepath.Join(dir, "snapshots")
	if b, err := os.ReadFile(filepath.Join(dir, "refs", "main")); err == nil {
		rev := strings.TrimSpace(string(b))
		p := filepath.Join(snaps, rev)
		if rev == "" || !exists(p) {
			return Resolved{}, notCachedf("%s: refs/main names revision %q, which snapshots/ does not hold: the download is incomplete; fetch it again, or pass a folder under %s", dir, rev, snaps)
		}
		return resolveSnapshot(p)
	}
	entries, _ := os.ReadDir(snaps)
	var revs []string
	for _, e := range entries {
		if e.IsDir() {
			revs = append(revs, e.Name())
		}
	}
	sort.Strings(revs)
	switch len(revs) {
	case 0:
		return Resolved{}, notCachedf("%s is a Hugging Face cache folder without snapshots: the download is incomplete; fetch the repo again", dir)
	case 1:
		return resolveSnapshot(filepath.Join(snaps, revs[0]))
	}
	return Resolved{}, fmt.Errorf("%s is a Hugging Face cache folder without refs/main and with %d snapshots (%s): pass one of them, %s",
		dir, len(revs), strings.Join(revs, ", "), filepath.Join(snaps, revs[0]))
}

// resolveSnapshot is a snapshot folder: a model directory, or the one GGUF
// file of a GGUF repo.
func resolveSnapshot(p string) (Resolved, error) {
	if exists(filepath.Join(p, "config.json")) {
		return Resolved{KindDir, p}, nil
	}
	ggufs, _ := filepath.Glob(filepath.Join(p, "*.gguf"))
	switch len(ggufs) {
	case 0:
		return Resolved{}, notCachedf("%s has no config.json: %s", p, modelDirHolds)
	case 1:
		return Resolved{KindGGUF, ggufs[0]}, nil
	}
	names := make([]string, len(ggufs))
	for i, g := range ggufs {
		names[i] = filepath.Base(g)
	}
	return Resolved{}, fmt.Errorf("%s holds %d GGUF files (%s): pass the one to run", p, len(ggufs), strings.Join(names, ", "))
}

func notCachedf(format string, args ...any) error {
	return notCached{fmt.Errorf(format, args...)}
}

// resolveForLoad is Resolve for Load: a repo id is read from the cache
// opts.Hub.CacheDir names (HubCache when empty), at opts.Hub.Revision
// unless it names one itself, and with opts.Download, fetched from the Hub
// when the cache lacks it or holds it in part.
func resolveForLoad(ctx context.Context, path string, opts LoadOptions) (Resolved, error) {
	hubDir := opts.Hub.CacheDir
	if hubDir == "" {
		hubDir = HubCache()
	}
	ref := isRepoRef(path)
	if ref && opts.Hub.Revision != "" && !strings.Contains(path, "@") {
		path += "@" + opts.Hub.Revision
	}
	src, err := resolve(path, hubDir)
	var nc notCached
	if err == nil || !opts.Download || !ref || !errors.As(err, &nc) {
		return src, err
	}
	id, rev, err := hub.ParseRef(path)
	if err != nil {
		return Resolved{}, err
	}
	o := opts.Hub
	o.Revision, o.CacheDir = rev, hubDir
	snap, err := hub.Download(ctx, id, o)
	if err != nil {
		return Resolved{}, err
	}
	return resolveSnapshot(snap)
}

// repoName turns models--ORG--NAME into ORG/NAME.
func repoName(folder string) string {
	return strings.Replace(strings.TrimPrefix(folder, "models--"), "--", "/", 1)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// isGGUF tells a GGUF file by its first four bytes.
func isGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	if _, err := f.Read(magic[:]); err != nil {
		return strings.HasSuffix(path, ".gguf")
	}
	return string(magic[:]) == "GGUF" || strings.HasSuffix(path, ".gguf")
}
