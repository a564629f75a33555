package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// download is one Download call under way.
type download struct {
	ctx     context.Context
	repo    string
	o       Options
	storage string // HUB/models--ORG--NAME
	locks   string // HUB/.locks/models--ORG--NAME
	client  *client
	commit  string // the commit the revision names, once known
}

func newDownload(ctx context.Context, repo string, o Options) *download {
	return &download{
		ctx:     ctx,
		repo:    repo,
		o:       o,
		storage: filepath.Join(o.CacheDir, RepoFolder(repo)),
		locks:   filepath.Join(o.CacheDir, ".locks", RepoFolder(repo)),
		client:  newClient(o.Endpoint, o.Token),
	}
}

// ref is the repo and its revision, as errors name them.
func (d *download) ref() string { return d.repo + "@" + d.o.Revision }

// cached is the snapshot the revision names in the cache, without the
// network.
func (d *download) cached() (string, error) {
	commit := d.o.Revision
	if !commitPattern.MatchString(commit) {
		b, err := os.ReadFile(filepath.Join(d.storage, "refs", filepath.FromSlash(d.o.Revision)))
		if err != nil {
			return "", fmt.Errorf("hub: %s: offline (HF_HUB_OFFLINE), and the Hugging Face cache (%s) does not hold it: unset HF_HUB_OFFLINE to download it", d.ref(), d.o.CacheDir)
		}
		commit = strings.TrimSpace(string(b))
	}
	snap := filepath.Join(d.storage, "snapshots", commit)
	if commit == "" || !commitPattern.MatchString(commit) || !isDir(snap) {
		return "", fmt.Errorf("hub: %s: offline (HF_HUB_OFFLINE), and the Hugging Face cache holds no snapshot %s: unset HF_HUB_OFFLINE to download it", d.ref(), snap)
	}
	return snap, nil
}

// info is what the Hub's API says of a revision.
type info struct {
	SHA      string `json:"sha"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

// run downloads the selected files of the revision.
func (d *download) run() (string, error) {
	u := d.o.Endpoint + "/api/models/" + d.repo + "/revision/" + escapeSegment(d.o.Revision)
	var body []byte
	err := d.retry(func() error {
		resp, err := d.client.do(d.ctx, http.MethodGet, u, nil, true)
		if err != nil {
			return d.netError(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return d.statusError(resp, "")
		}
		if body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20)); err != nil {
			return d.netError(err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	var in info
	if err := json.Unmarshal(body, &in); err != nil {
		return "", fmt.Errorf("hub: %s: GET %s: not the Hub's JSON (%v): is the endpoint (HF_ENDPOINT) a Hugging Face Hub?", d.ref(), u, err)
	}
	if !commitPattern.MatchString(in.SHA) {
		return "", fmt.Errorf("hub: %s: GET %s: the answer's sha %q is not a commit hash: is the endpoint (HF_ENDPOINT) a Hugging Face Hub?", d.ref(), u, in.SHA)
	}
	d.commit = in.SHA
	names := make([]string, 0, len(in.Siblings))
	for _, s := range in.Siblings {
		if !cleanPath(s.RFilename) {
			return "", fmt.Errorf("hub: %s: the Hub lists the file %q, a path outside the repo: refused", d.ref(), s.RFilename)
		}
		names = append(names, s.RFilename)
	}
	files := selectFiles(names, d.o.Allow, d.o.Ignore)
	if len(files) == 0 {
		return "", d.noneSelected(names)
	}
	snap := filepath.Join(d.storage, "snapshots", d.commit)
	for _, f := range files {
		if err := d.file(f, snap); err != nil {
			return "", err
		}
	}
	if err := d.writeRef(); err != nil {
		return "", err
	}
	return snap, nil
}

// noneSelected is the error of a revision none of whose files the
// patterns select.
func (d *download) noneSelected(names []string) error {
	allow := d.o.Allow
	if len(allow) == 0 {
		allow = ModelFiles
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	list := sorted
	if len(list) > 8 {
		list = append(list[:8:8], fmt.Sprintf("and %d more", len(sorted)-8))
	}
	what := "none of its files"
	if len(names) > 0 {
		what = fmt.Sprintf("none of its %d files (%s)", len(names), strings.Join(list, ", "))
	}
	msg := fmt.Sprintf("hub: %s: %s matches the patterns %s", d.ref(), what, strings.Join(allow, " "))
	if len(d.o.Ignore) > 0 {
		msg += " less " + strings.Join(d.o.Ignore, " ")
	}
	hint := "pass patterns that match the files to fetch"
	for _, n := range names {
		if strings.HasSuffix(n, ".gguf") {
			hint = `a GGUF repo: pass a pattern that names the .gguf file to fetch, such as "*Q4_K_M.gguf"`
			break
		}
	}
	return errors.New(msg + ": " + hint)
}

// retry runs f again, up to retries times, while it fails for a reason
// that may pass: a 5xx, 408 or 429 status, a timeout, a connection reset.
func (d *download) retry(f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || attempt > retries || d.ctx.Err() != nil || !mayPass(err) {
			return err
		}
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// file puts one file of the revision into the snapshot snap.
func (d *download) file(name, snap string) error {
	pointer := filepath.Join(snap, filepath.FromSlash(name))
	if st, err := os.Stat(pointer); err == nil && st.Mode().IsRegular() {
		d.progress(name, st.Size(), st.Size())
		return nil
	}
	m, err := d.metadata(name)
	if err != nil {
		return err
	}
	blob := filepath.Join(d.storage, "blobs", m.etag)
	if err := os.MkdirAll(filepath.Dir(blob), 0o777); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(pointer), 0o777); err != nil {
		return err
	}
	writeCacheTag(d.o.CacheDir)
	unlock, err := d.lock(m.etag)
	if err != nil {
		return err
	}
	defer unlock()
	if st, err := os.Stat(blob); err == nil && st.Mode().IsRegular() {
		d.progress(name, st.Size(), st.Size())
	} else if err := d.fetch(name, m, blob); err != nil {
		return err
	}
	return link(blob, pointer)
}

// writeRef records the commit the revision names, unless the revision is
// that commit or the ref says so already; it replaces the file at once,
// so that a reader never sees half of it.
func (d *download) writeRef() error {
	if d.o.Revision == d.commit {
		return nil
	}
	ref := filepath.Join(d.storage, "refs", filepath.FromSlash(d.o.Revision))
	if b, err := os.ReadFile(ref); err == nil && string(b) == d.commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(ref), 0o777); err != nil {
		return err
	}
	tmp := ref + "." + randomHex(4) + ".tmp"
	if err := os.WriteFile(tmp, []byte(d.commit), 0o666); err != nil {
		return err
	}
	if err := os.Rename(tmp, ref); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (d *download) progress(name string, done, total int64) {
	if d.o.Progress != nil {
		d.o.Progress(name, done, total)
	}
}

// lock takes the lock huggingface_hub takes on a blob it writes
// (.locks/models--ORG--NAME/ETAG.lock, by flock), waiting while another
// process holds it.
func (d *download) lock(etag string) (func(), error) {
	if err := os.MkdirAll(d.locks, 0o777); err != nil {
		return nil, err
	}
	path := filepath.Join(d.locks, etag+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o664)
	if err != nil {
		return nil, err
	}
	_ = f.Chmod(0o664) // group-writable whatever the umask, as huggingface_hub's, for a cache shared by a group
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("hub: %s: %w", path, err)
		}
		if ok {
			return func() { unlockFile(f); f.Close() }, nil
		}
		select {
		case <-d.ctx.Done():
			f.Close()
			return nil, d.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// link makes pointer a symlink to blob, relative (../../blobs/ETAG), as
// huggingface_hub makes it; where the file system has no symlinks it
// holds a copy of the blob.
func link(blob, pointer string) error {
	absBlob, err := filepath.Abs(blob)
	if err != nil {
		return err
	}
	absPointer, err := filepath.Abs(pointer)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(absPointer), absBlob)
	if err != nil {
		rel = absBlob
	}
	if err := os.Remove(absPointer); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(rel, absPointer); err == nil {
		return nil
	}
	return copyFile(absBlob, absPointer)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// cacheTag is the CACHEDIR.TAG huggingface_hub leaves in the cache, so
// that backup tools skip it.
const cacheTag = "Signature: 8a477f597d28d172789f06886806bc55\n" +
	"# This file is a cache directory tag: the Hugging Face cache.\n" +
	"# For information about cache directory tags, see:\n" +
	"#\thttps://bford.info/cachedir/\n"

// writeCacheTag writes the cache's CACHEDIR.TAG unless it has one.
func writeCacheTag(dir string) {
	p := filepath.Join(dir, "CACHEDIR.TAG")
	if _, err := os.Stat(p); err == nil {
		return
	}
	_ = os.WriteFile(p, []byte(cacheTag), 0o666)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
