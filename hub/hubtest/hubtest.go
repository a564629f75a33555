// Package hubtest is a Hugging Face Hub on local ports, for tests: it
// answers the routes package hub and huggingface_hub ask, with the
// headers the Hub sends, for repos whose files a test gives.
//
//	GET  /api/models/ORG/NAME/revision/REV    {"id", "sha", "siblings": [{"rfilename"}], ...}
//	GET  /api/models/ORG/NAME/tree/REV        [{"type": "file", "path", "oid", "size", "lfs"}] (huggingface_hub lists a commit so)
//	HEAD /ORG/NAME/resolve/REV/FILE           X-Repo-Commit and, for a file kept in git,
//	GET                                       its bytes with ETag "<git blob id>" (Range requests
//	                                          answered); for an LFS file (*.safetensors, *.gguf,
//	                                          *.bin) 302 to the CDN, with X-Linked-Etag "<sha256>"
//	                                          and X-Linked-Size
//	GET  CDN/cdn/SHA256                       an LFS file's bytes, Range requests answered
//
// The CDN is the same server on a second port, so another origin, as the
// Hub's CDN is: a client sends it no token. Errors carry the Hub's
// X-Error-Code: RepoNotFound, RevisionNotFound, EntryNotFound (404) and
// GatedRepo (401 without a token, 403 with another than Token).
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is the Hub and its CDN.
type Server struct {
	// URL is the Hub's endpoint (HF_ENDPOINT); CDN is where LFS files
	// redirect.
	URL, CDN string
	// Token is what a gated repo wants in "Authorization: Bearer".
	Token string

	mu       sync.Mutex
	repos    map[string]*repo
	blobs    map[string][]byte // sha256 → an LFS file's bytes
	cut      map[string]bool   // ORG/NAME/FILE whose next full GET stops halfway
	corrupt  map[string]bool   // ORG/NAME/FILE served with a byte changed
	fail     map[string][]int  // ORG/NAME/FILE → the statuses its next requests get
	requests []Request
}

// Request is one request the server answered.
type Request struct {
	CDN           bool // to the CDN's port
	Method, Path  string
	Range         string
	Authorization string
}

type repo struct {
	gated   bool
	refs    map[string]string            // branch or tag → commit
	commits map[string]map[string][]byte // commit → its files
}

// New starts a server that stops when the test ends.
func New(t testing.TB) *Server {
	s := &Server{Token: "hf_test_token", repos: map[string]*repo{}, blobs: map[string][]byte{},
		cut: map[string]bool{}, corrupt: map[string]bool{}, fail: map[string][]int{}}
	hub := httptest.NewServer(s.handler(false))
	cdn := httptest.NewServer(s.handler(true))
	t.Cleanup(func() { hub.Close(); cdn.Close() })
	s.URL, s.CDN = hub.URL, cdn.URL
	return s
}

// Add commits files to the repo id (ORG/NAME) on branch (or tag) ref and
// returns the commit hash, a sha1 of the files as git's is of a tree.
func (s *Server) Add(id, ref string, files map[string][]byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil {
		r = &repo{refs: map[string]string{}, commits: map[string]map[string][]byte{}}
		s.repos[id] = r
	}
	h := sha1.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", id, ref, len(r.commits))
	for _, n := range sortedNames(files) {
		fmt.Fprintf(h, "%s\x00%s\x00", n, gitBlobID(files[n]))
	}
	commit := hex.EncodeToString(h.Sum(nil))
	r.commits[commit] = files
	r.refs[ref] = commit
	for _, b := range files {
		sum := sha256.Sum256(b)
		s.blobs[hex.EncodeToString(sum[:])] = b
	}
	return commit
}

// Gate makes the repo gated: it answers only requests with Token.
func (s *Server) Gate(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repos[id].gated = true
}

// CutOnce makes the next GET of the file's bytes from their start drop
// the connection halfway through, once.
func (s *Server) CutOnce(id, file string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut[id+"/"+file] = true
}

// Corrupt makes the file's bytes come with one byte changed (the size and
// the ETag as before).
func (s *Server) Corrupt(id, file string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corrupt[id+"/"+file] = on
}

// FailNext makes the next requests for the file (its metadata or its
// bytes, from the Hub or the CDN) answer these statuses, one each, with
// the Hub's error headers (a 404 is EntryNotFound); a status 0 lets that
// request through.
func (s *Server) FailNext(id, file string, statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[id+"/"+file] = append(s.fail[id+"/"+file], statuses...)
}

// failed answers the next failure FailNext asked for the file, if any.
func (s *Server) failed(w http.ResponseWriter, id, file string) bool {
	s.mu.Lock()
	key := id + "/" + file
	statuses := s.fail[key]
	if len(statuses) > 0 {
		s.fail[key] = statuses[1:]
	}
	s.mu.Unlock()
	if len(statuses) == 0 || statuses[0] == 0 {
		return false
	}
	code := map[int]string{http.StatusNotFound: "EntryNotFound"}[statuses[0]]
	hubError(w, statuses[0], code, http.StatusText(statuses[0]))
	return true
}

// Requests are the requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// IsLFS says whether the Hub keeps a file in LFS, as the .gitattributes
// of a new model repo does.
func IsLFS(name string) bool {
	for _, ext := range []string{".safetensors", ".gguf", ".bin"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// gitBlobID is git's id of a blob: sha1 of "blob SIZE\x00" and the bytes.
func gitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// lfsPointer is the pointer file git keeps for an LFS file.
func lfsPointer(b []byte) []byte {
	return []byte(fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha256Hex(b), len(b)))
}

func sortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (s *Server) handler(cdn bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, Request{CDN: cdn, Method: r.Method, Path: r.URL.RequestURI(),
			Range: r.Header.Get("Range"), Authorization: r.Header.Get("Authorization")})
		s.mu.Unlock()
		if cdn {
			s.serveCDN(w, r)
			return
		}
		s.serveHub(w, r)
	})
}

// hubError answers as the Hub does when it refuses.
func hubError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// find is the repo and the commit a request's id and revision name, or
// false once it has answered the refusal.
func (s *Server) find(w http.ResponseWriter, r *http.Request, id, rev string) (*repo, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repos[id]
	if rp == nil {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	if rp.gated {
		switch auth := r.Header.Get("Authorization"); auth {
		case "Bearer " + s.Token:
		case "":
			hubError(w, http.StatusUnauthorized, "GatedRepo", fmt.Sprintf("Access to model %s is restricted. You must have access to it and be authenticated to access it. Please log in.", id))
			return nil, "", false
		default:
			hubError(w, http.StatusForbidden, "GatedRepo", fmt.Sprintf("Access to model %s is restricted and you are not in the authorized list. Visit %s/%s to ask for access.", id, s.URL, id))
			return nil, "", false
		}
	}
	commit := rp.refs[rev]
	if commit == "" && rp.commits[rev] != nil {
		commit = rev
	}
	if commit == "" {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, "", false
	}
	return rp, commit, true
}

// splitRepoPath splits "ORG/NAME/KIND/REST" (REST still escaped).
func splitRepoPath(p string) (id, kind, rest string, ok bool) {
	parts := strings.SplitN(p, "/", 4)
	if len(parts) < 4 {
		return "", "", "", false
	}
	return parts[0] + "/" + parts[1], parts[2], parts[3], true
}

func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	if api, ok := strings.CutPrefix(p, "/api/models/"); ok {
		id, kind, rest, ok := splitRepoPath(api)
		if !ok || r.Method != http.MethodGet || (kind != "revision" && kind != "tree") {
			http.NotFound(w, r)
			return
		}
		rev, err := url.PathUnescape(strings.SplitN(rest, "/", 2)[0])
		if err != nil {
			http.NotFound(w, r)
			return
		}
		rp, commit, ok := s.find(w, r, id, rev)
		if !ok {
			return
		}
		files := rp.commits[commit]
		w.Header().Set("Content-Type", "application/json")
		if kind == "tree" {
			var out []map[string]any
			for _, n := range sortedNames(files) {
				e := map[string]any{"type": "file", "path": n, "size": len(files[n]), "oid": gitBlobID(files[n])}
				if IsLFS(n) {
					ptr := lfsPointer(files[n])
					e["oid"] = gitBlobID(ptr)
					e["lfs"] = map[string]any{"oid": sha256Hex(files[n]), "size": len(files[n]), "pointerSize": len(ptr)}
				}
				out = append(out, e)
			}
			json.NewEncoder(w).Encode(out)
			return
		}
		var siblings []map[string]string
		for _, n := range sortedNames(files) {
			siblings = append(siblings, map[string]string{"rfilename": n})
		}
		org, _, _ := strings.Cut(id, "/")
		json.NewEncoder(w).Encode(map[string]any{
			"_id": commit[:24], "id": id, "modelId": id, "author": org, "sha": commit,
			"lastModified": "2025-01-01T00:00:00.000Z", "private": false, "disabled": false,
			"gated": map[bool]any{true: "manual", false: false}[rp.gated], "tags": []string{}, "siblings": siblings,
		})
		return
	}
	id, kind, rest, ok := splitRepoPath(strings.TrimPrefix(p, "/"))
	if !ok || kind != "resolve" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	escRev, escFile, _ := strings.Cut(rest, "/")
	rev, err1 := url.PathUnescape(escRev)
	file, err2 := url.PathUnescape(escFile)
	if err1 != nil || err2 != nil {
		http.NotFound(w, r)
		return
	}
	rp, commit, ok := s.find(w, r, id, rev)
	if !ok {
		return
	}
	b, ok := rp.commits[commit][file]
	w.Header().Set("X-Repo-Commit", commit)
	if s.failed(w, id, file) {
		return
	}
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	if IsLFS(file) {
		w.Header().Set("ETag", `"`+gitBlobID(lfsPointer(b))+`"`)
		w.Header().Set("X-Linked-Etag", `"`+sha256Hex(b)+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(b)))
		q := url.Values{"repo": {id}, "file": {file}}
		w.Header().Set("Location", s.CDN+"/cdn/"+sha256Hex(b)+"?"+q.Encode())
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitBlobID(b)+`"`)
	s.serveBytes(w, r, id, file, b)
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	sha, ok := strings.CutPrefix(r.URL.Path, "/cdn/")
	s.mu.Lock()
	b, found := s.blobs[sha]
	s.mu.Unlock()
	if !ok || !found || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	id, file := r.URL.Query().Get("repo"), r.URL.Query().Get("file")
	if s.failed(w, id, file) {
		return
	}
	s.serveBytes(w, r, id, file, b)
}

// serveBytes answers a file's bytes, Range requests included, cut or
// changed as the test asked.
func (s *Server) serveBytes(w http.ResponseWriter, r *http.Request, id, file string, b []byte) {
	key := id + "/" + file
	s.mu.Lock()
	cut := s.cut[key] && r.Method == http.MethodGet && r.Header.Get("Range") == ""
	if cut {
		delete(s.cut, key)
	}
	if s.corrupt[key] && len(b) > 0 {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0xff
	}
	s.mu.Unlock()
	if cut {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b[:len(b)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
}

// Isolate keeps the environment's Hugging Face settings out of a test: no
// token, no offline mode, no endpoint, a cache of the test's own (HF_HOME
// a temporary folder), whose hub folder it returns.
func Isolate(t testing.TB) string {
	t.Helper()
	home := t.TempDir()
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
		"TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		t.Setenv(k, "")
	}
	t.Setenv("HF_HOME", home)
	return filepath.Join(home, "hub")
}

// Files reads the files of a folder (not its subfolders), by name, as a
// repo's files for Add.
func Files(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}
