package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userAgent is what Download tells the Hub it is.
const userAgent = "archgen-hub/1"

// client makes the requests of one download: to the Hub with the token,
// to anywhere else (the CDN an LFS file redirects to) without it.
type client struct {
	endpoint *url.URL
	token    string
	http     *http.Client // follows no redirect: each caller decides
}

func newClient(endpoint, token string) *client {
	u, _ := url.Parse(endpoint) // checked by Options.fill
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true // sizes and Range offsets are of the bytes as stored
	t.ResponseHeaderTimeout = time.Minute
	return &client{
		endpoint: u,
		token:    token,
		http: &http.Client{
			Transport:     t,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// hubOrigins are the Hub's own addresses beside the endpoint: the token
// is sent to them too, as huggingface_hub sends it.
var hubOrigins = []string{"https://huggingface.co", "https://hf.co"}

// onHub says whether u is served by the endpoint's origin or the Hub's.
func (c *client) onHub(u *url.URL) bool {
	if sameOrigin(u, c.endpoint) {
		return true
	}
	for _, h := range hubOrigins {
		hu, _ := url.Parse(h)
		if sameOrigin(u, hu) {
			return true
		}
	}
	return false
}

// sameOrigin compares scheme, host and port (the scheme's own when none
// is written).
func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// do sends one request; the token goes along when the URL is the Hub's.
// follow makes it follow redirects (a CDN's), dropping the token when
// they leave the Hub.
func (c *client) do(ctx context.Context, method, rawURL string, header http.Header, follow bool) (*http.Response, error) {
	for hops := 0; ; hops++ {
		req, err := http.NewRequestWithContext(ctx, method, rawURL, nil)
		if err != nil {
			return nil, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		req.Header.Set("User-Agent", userAgent)
		req.Header.Set("Accept-Encoding", "identity")
		if c.token != "" && c.onHub(req.URL) {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		loc := resp.Header.Get("Location")
		if !follow || !isRedirect(resp.StatusCode) || loc == "" {
			return resp, nil
		}
		if hops >= 10 {
			resp.Body.Close()
			return nil, fmt.Errorf("%s %s: more than 10 redirects", method, rawURL)
		}
		next, err := req.URL.Parse(loc)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s %s: redirect to %q: %w", method, rawURL, loc, err)
		}
		rawURL = next.String()
	}
}

func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// meta is what the Hub says of one file of a commit.
type meta struct {
	etag     string // the blob's name: sha256 for an LFS file, the git blob id for another
	size     int64  // -1 when the Hub does not say
	location string // where its bytes are: the CDN for an LFS file
}

// metadata asks the Hub for one file's metadata (HEAD on its resolve
// URL), following redirects that stay on the Hub (a renamed repo) and
// reading the one that leaves it (to the CDN) as huggingface_hub does.
func (d *download) metadata(name string) (meta, error) {
	var m meta
	err := d.retry(func() error {
		var err error
		m, err = d.metadataOnce(name)
		return err
	})
	return m, err
}

func (d *download) metadataOnce(name string) (meta, error) {
	u := d.resolveURL(name)
	for hops := 0; hops <= 10; hops++ {
		resp, err := d.client.do(d.ctx, http.MethodHead, u, nil, false)
		if err != nil {
			return meta{}, d.netError(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return meta{}, d.statusError(resp, name)
		}
		location := u
		redirect := isRedirect(resp.StatusCode) && resp.Header.Get("Location") != ""
		if redirect {
			next, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
			if err != nil {
				return meta{}, fmt.Errorf("hub: %s: %s: HEAD %s: redirect to %q: %v", d.ref(), name, u, resp.Header.Get("Location"), err)
			}
			if sameOrigin(next, resp.Request.URL) {
				u = next.String()
				continue
			}
			location = next.String()
		}
		m := meta{location: location, size: -1}
		if resp.Header.Get("X-Repo-Commit") == "" {
			return meta{}, fmt.Errorf("hub: %s: %s: HEAD %s: the answer has no X-Repo-Commit header: is the endpoint (HF_ENDPOINT) a Hugging Face Hub?", d.ref(), name, u)
		}
		etag := resp.Header.Get("X-Linked-Etag")
		if etag == "" {
			etag = resp.Header.Get("ETag")
		}
		m.etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
		if m.etag == "" {
			return meta{}, fmt.Errorf("hub: %s: %s: HEAD %s: the answer has no ETag: the file cannot be named in the cache nor checked", d.ref(), name, u)
		}
		if !etagPattern.MatchString(m.etag) {
			return meta{}, fmt.Errorf("hub: %s: %s: HEAD %s: the ETag %q is no file name: refused", d.ref(), name, u, m.etag)
		}
		size := resp.Header.Get("X-Linked-Size")
		if size == "" && !redirect {
			size = resp.Header.Get("Content-Length")
		}
		if n, err := strconv.ParseInt(size, 10, 64); err == nil && n >= 0 {
			m.size = n
		}
		return m, nil
	}
	return meta{}, fmt.Errorf("hub: %s: %s: HEAD %s: more than 10 redirects", d.ref(), name, d.resolveURL(name))
}

// resolveURL is the Hub's URL of a file at the commit.
func (d *download) resolveURL(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = escapeSegment(p)
	}
	return d.o.Endpoint + "/" + d.repo + "/resolve/" + d.commit + "/" + strings.Join(parts, "/")
}

// escapeSegment escapes one part of a URL's path, "/" included.
func escapeSegment(s string) string { return url.PathEscape(s) }

// netError is an error of the network (no HTTP status).
func (d *download) netError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("hub: %s: cannot reach the Hub (%s): %w (HF_HUB_OFFLINE=1 uses the cache alone)", d.ref(), d.o.Endpoint, err)
}

// HTTPError is a request the Hub (or its CDN) answered with an error
// status.
type HTTPError struct {
	Repo     string // ORG/NAME
	Revision string
	File     string // "" for the revision's listing
	Method   string
	URL      string
	Status   int    // the HTTP status
	Code     string // the Hub's X-Error-Code: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo, ...
	// Hint says what to do about it.
	Hint string
	// HubMessage is the Hub's X-Error-Message, when it gives one.
	HubMessage string
}

func (e *HTTPError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hub: %s@%s: ", e.Repo, e.Revision)
	if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	fmt.Fprintf(&b, "%s %s: %d %s", e.Method, e.URL, e.Status, http.StatusText(e.Status))
	if e.Hint != "" {
		b.WriteString(": " + e.Hint)
	}
	if e.HubMessage != "" {
		fmt.Fprintf(&b, " (the Hub: %q)", e.HubMessage)
	}
	return b.String()
}

// statusError is the error of an answer with an error status to a
// request for the revision (file "") or one of its files.
func (d *download) statusError(resp *http.Response, file string) error {
	e := &HTTPError{
		Repo: d.repo, Revision: d.o.Revision, File: file,
		Method: resp.Request.Method, URL: resp.Request.URL.String(), Status: resp.StatusCode,
		Code: resp.Header.Get("X-Error-Code"), HubMessage: resp.Header.Get("X-Error-Message"),
	}
	switch {
	case (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden) && !d.client.onHub(resp.Request.URL):
		e.Hint = "the CDN the Hub sent the download to refused it (its signed address may have expired): download again"
	case e.Code == "GatedRepo" && d.o.Token != "":
		e.Hint = fmt.Sprintf("a gated repo, which the token given (HF_TOKEN) may not read yet: accept its conditions at %s/%s with that account, or use another token", d.o.Endpoint, d.repo)
	case e.Code == "GatedRepo":
		e.Hint = fmt.Sprintf("a gated repo: accept its conditions at %s/%s, then set HF_TOKEN to an access token of that account", d.o.Endpoint, d.repo)
	case e.Status == http.StatusUnauthorized && d.o.Token != "":
		e.Hint = "the token given (HF_TOKEN) was refused: check it, or that it may read this repo"
	case e.Status == http.StatusUnauthorized || (e.Status == http.StatusForbidden && d.o.Token == ""):
		e.Hint = "a gated or private repo, or none: set HF_TOKEN to an access token that may read it"
	case e.Status == http.StatusForbidden:
		e.Hint = "the token given (HF_TOKEN) may not read this repo"
	case e.Code == "RevisionNotFound":
		e.Hint = fmt.Sprintf("the repo has no revision %q (a branch, a tag or a commit hash)", d.o.Revision)
	case e.Code == "EntryNotFound" || (e.Status == http.StatusNotFound && file != "" && e.Code == ""):
		e.Hint = "no such file at this revision"
	case e.Status == http.StatusNotFound:
		e.Hint = "no such repo or revision on the Hub (check the repo id and the revision)"
	case e.Status == http.StatusTooManyRequests:
		e.Hint = "the Hub limits requests: wait and retry, or set HF_TOKEN (its limits are higher)"
	case e.Status >= 500:
		e.Hint = "the Hub failed: retry later"
	}
	return e
}

// mayPass says whether an error of a request may pass if it is made
// again.
func mayPass(err error) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status >= 500 || he.Status == http.StatusRequestTimeout || he.Status == http.StatusTooManyRequests
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

// transient says whether an error of a file's transfer is worth a retry
// from where it stopped: any error of the network, or a status that says
// "later"; not a status that refuses, nor bytes that do not check, nor an
// error of the local files.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status >= 500 || he.Status == http.StatusRequestTimeout || he.Status == http.StatusTooManyRequests
	}
	var ce *checkError
	if errors.As(err, &ce) {
		return false
	}
	var fe *fileError
	return !errors.As(err, &fe)
}
