package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// stallTimeout ends a transfer that brings no byte for this long; it is
// then retried from where it stopped.
var stallTimeout = time.Minute

// retries is how many times in a row a transfer is retried without a byte
// coming.
const retries = 5

// checkError is a download whose bytes are not those the Hub describes:
// its size or its checksum. It is not retried.
type checkError struct{ msg string }

func (e *checkError) Error() string { return e.msg }

// fileError is an error of the local file system. It is not retried.
type fileError struct{ err error }

func (e *fileError) Error() string { return e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }

var errStalled = errors.New("stalled")

// fetch downloads one file to blob, through blob.incomplete, continuing
// what an earlier attempt left there, and checks its size and checksum.
func (d *download) fetch(name string, m meta, blob string) error {
	part := blob + ".incomplete"
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if m.size >= 0 && have > m.size {
		if err := f.Truncate(0); err != nil {
			return err
		}
		have = 0
	}
	sum := newStreamSum(m.etag)
	if sum != nil && have > 0 {
		if _, err := io.Copy(sum, io.NewSectionReader(f, 0, have)); err != nil {
			return err
		}
	}
	total := m.size
	d.progress(name, have, total)
	for failed := 0; total < 0 || have < total; {
		got, err := d.get(name, m.location, f, &have, &total, sum)
		if err == nil {
			break
		}
		if d.ctx.Err() != nil {
			return d.ctx.Err()
		}
		if !transient(err) {
			return err
		}
		if got > 0 {
			failed = 0
		}
		if failed++; failed > retries {
			return err
		}
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(time.Duration(failed) * 200 * time.Millisecond):
		}
	}
	if err := d.check(name, m, f, have, sum); err != nil {
		f.Close()
		os.Remove(part)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(part, blob)
}

// contentRange reads "bytes START-END/TOTAL" (or "bytes */TOTAL").
var contentRange = regexp.MustCompile(`^bytes (?:(\d+)-\d+|\*)/(\d+|\*)$`)

// get makes one GET of the file's bytes from have on, appending them to f
// (and to sum). It returns how many bytes came.
func (d *download) get(name, loc string, f *os.File, have, total *int64, sum hash.Hash) (int64, error) {
	h := http.Header{}
	if *have > 0 {
		h.Set("Range", fmt.Sprintf("bytes=%d-", *have))
	}
	ctx, cancel := context.WithCancelCause(d.ctx)
	defer cancel(nil)
	resp, err := d.client.do(ctx, http.MethodGet, loc, h, true)
	if err != nil {
		return 0, d.transferError(name, err, nil)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if *have > 0 { // the server ignored the Range: start over
			if err := restart(f, sum); err != nil {
				return 0, err
			}
			*have = 0
		}
		if n := resp.ContentLength; n >= 0 {
			if err := d.sameSize(name, resp, *total, n); err != nil {
				return 0, err
			}
			*total = n
		}
	case http.StatusPartialContent:
		m := contentRange.FindStringSubmatch(resp.Header.Get("Content-Range"))
		if m == nil || m[1] != strconv.FormatInt(*have, 10) {
			return 0, fmt.Errorf("hub: %s: %s: GET %s: asked for the bytes from %d on, got Content-Range %q",
				d.ref(), name, resp.Request.URL, *have, resp.Header.Get("Content-Range"))
		}
		if n, err := strconv.ParseInt(m[2], 10, 64); err == nil {
			if err := d.sameSize(name, resp, *total, n); err != nil {
				return 0, err
			}
			*total = n
		}
	case http.StatusRequestedRangeNotSatisfiable:
		m := contentRange.FindStringSubmatch(resp.Header.Get("Content-Range"))
		if m != nil && m[2] == strconv.FormatInt(*have, 10) { // all of it came already
			*total = *have
			return 0, nil
		}
		from := *have
		if err := restart(f, sum); err != nil {
			return 0, err
		}
		*have = 0
		return 0, fmt.Errorf("hub: %s: %s: GET %s: %d for the bytes from %d on: starting over", d.ref(), name, resp.Request.URL, resp.StatusCode, from)
	default:
		return 0, d.statusError(resp, name)
	}
	if _, err := f.Seek(*have, io.SeekStart); err != nil {
		return 0, &fileError{err}
	}
	stall := time.AfterFunc(stallTimeout, func() { cancel(errStalled) })
	defer stall.Stop()
	buf := make([]byte, 1<<20)
	var got int64
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			stall.Reset(stallTimeout)
			if _, err := f.Write(buf[:n]); err != nil {
				return got, &fileError{err}
			}
			if sum != nil {
				sum.Write(buf[:n])
			}
			*have += int64(n)
			got += int64(n)
			d.progress(name, *have, *total)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return got, d.transferError(name, rerr, ctx)
		}
	}
	if *total < 0 { // no length given: what came is the file
		*total = *have
		d.progress(name, *have, *total)
	}
	if *have < *total {
		return got, d.transferError(name, io.ErrUnexpectedEOF, nil)
	}
	return got, nil
}

// sameSize refuses a size that differs from the one the Hub gave.
func (d *download) sameSize(name string, resp *http.Response, want, got int64) error {
	if want >= 0 && got != want {
		return &checkError{fmt.Sprintf("hub: %s: %s: GET %s: the file is %d bytes there, the Hub says %d: refused",
			d.ref(), name, resp.Request.URL, got, want)}
	}
	return nil
}

// restart empties the partial file and its running checksum.
func restart(f *os.File, sum hash.Hash) error {
	if err := f.Truncate(0); err != nil {
		return &fileError{err}
	}
	if sum != nil {
		sum.Reset()
	}
	return nil
}

// transferError is an error of the network while a file comes.
func (d *download) transferError(name string, err error, ctx context.Context) error {
	if ctx != nil && context.Cause(ctx) == errStalled {
		return fmt.Errorf("hub: %s: %s: no byte came for %v", d.ref(), name, stallTimeout)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if d.ctx.Err() != nil {
			return d.ctx.Err()
		}
	}
	return fmt.Errorf("hub: %s: %s: %w (what came is kept in blobs/ and the next download goes on from it)", d.ref(), name, err)
}

// newStreamSum is the running checksum of a file whose ETag is its
// sha256 (an LFS file), nil for others.
func newStreamSum(etag string) hash.Hash {
	if len(etag) == 64 && isHex(etag) {
		return sha256.New()
	}
	return nil
}

// check compares what came (have bytes in f) with the size and ETag the
// Hub gave: an LFS file's sha256, another file's git blob id. An ETag of
// another form names the blob but is no checksum.
func (d *download) check(name string, m meta, f *os.File, have int64, sum hash.Hash) error {
	if m.size >= 0 && have != m.size {
		return &checkError{fmt.Sprintf("hub: %s: %s: %d bytes came, the Hub says %d: refused", d.ref(), name, have, m.size)}
	}
	var kind, got string
	switch {
	case sum != nil:
		kind, got = "sha256", hex.EncodeToString(sum.Sum(nil))
	case len(m.etag) == 40 && isHex(m.etag):
		h := sha1.New()
		fmt.Fprintf(h, "blob %d\x00", have)
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, have)); err != nil {
			return &fileError{err}
		}
		kind, got = "git blob id", hex.EncodeToString(h.Sum(nil))
	default:
		return nil
	}
	if !strings.EqualFold(got, m.etag) {
		return &checkError{fmt.Sprintf("hub: %s: %s: the download's %s is %s, the Hub's ETag says %s: the bytes were damaged on the way; they are removed, download again",
			d.ref(), name, kind, got, m.etag)}
	}
	return nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}
