package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/archgen/archgen/hub"
)

const pullDoc = `Downloads a model repo from the Hugging Face Hub into the Hugging Face
cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub), in the
layout huggingface_hub and mlx-lm share, and prints the snapshot folder
that holds it. By default the files a model needs are fetched: config.json,
generation_config.json, model*.safetensors and model.safetensors.index.json,
tokenizer.json, tokenizer_config.json, special_tokens_map.json and
chat_template.jinja/.json; -include replaces that list (GGUF files come only
when a pattern names them, "*Q4_K_M.gguf"), -exclude leaves files out. The
patterns are huggingface_hub's: * matches / too, a pattern ending in /
names a folder. Files the cache holds are not fetched again; a download cut
off goes on where it stopped at the next pull, and each file is checked
against the Hub's checksum. HF_TOKEN is sent for gated and private repos;
HF_HUB_OFFLINE=1 reads the cache alone. On a terminal each file shows a
progress bar; elsewhere a line on standard error says each file fetched.`

func (a *app) pull(args []string) error {
	c := a.flags("pull", "ORG/NAME[@REVISION] [-include GLOB,...] [-exclude GLOB,...] [-endpoint URL]", pullDoc)
	c.rest = true
	include := c.String("include", "", "fetch the files these comma-separated patterns match, instead of a model's files")
	exclude := c.String("exclude", "", "leave out the files these comma-separated patterns match")
	endpoint := c.String("endpoint", "", "the Hub's URL (default $HF_ENDPOINT, else "+hub.DefaultEndpoint+")")
	cacheDir := c.String("cache-dir", "", "the Hugging Face cache to fill (default $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)")
	if err := a.parse(c, args); err != nil {
		return err
	}
	// The repo id comes first or after the flags; flags may follow it.
	var ref string
	if rest := c.Args(); len(rest) > 0 {
		ref = rest[0]
		if err := c.Parse(rest[1:]); err != nil {
			return usagef("%v (%q lists the flags)", err, c.Name()+" -h")
		}
		if c.NArg() > 0 {
			return usagef("unexpected arguments %q (%q lists the flags)", c.Args(), c.Name()+" -h")
		}
	}
	if ref == "" {
		return usagef("pull needs a repo id: archrun pull ORG/NAME[@REVISION]")
	}
	repo, rev, err := hub.ParseRef(ref)
	if err != nil {
		return usageError{strings.TrimPrefix(err.Error(), "hub: ")}
	}
	intr := newInterrupts()
	defer intr.stop()
	ctx, done := intr.turn()
	defer done()
	report := newFetchReport(a.stderr)
	snap, err := hub.Download(ctx, repo, hub.Options{
		Revision: rev, Endpoint: *endpoint, CacheDir: *cacheDir,
		Allow: splitList(*include), Ignore: splitList(*exclude),
		Progress: report.progress,
	})
	report.finish()
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(a.stderr, "archrun: pull interrupted: what came is kept, and the next pull of "+ref+" goes on from it")
		return errInterrupted
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, snap)
	return nil
}

// fetchReport shows a download's files on w: a progress bar each while
// it comes when w is a terminal, else a line each once it is fetched.
// Files the cache held are not shown.
type fetchReport struct {
	w     io.Writer
	tty   bool
	file  string // the file under way
	quiet bool   // nothing more to show of it: the cache held it, or it is shown done
	bar   *progressbar.ProgressBar
	max   int64
}

func newFetchReport(w io.Writer) *fetchReport {
	if groupRank() > 0 {
		w = io.Discard // rank 0 alone speaks
	}
	f, ok := w.(*os.File)
	return &fetchReport{w: w, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (r *fetchReport) progress(file string, done, total int64) {
	if file != r.file {
		r.finish()
		r.file, r.quiet = file, done == total && total >= 0
		if !r.quiet && r.tty {
			r.max = total
			r.bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(r.w),
				progressbar.OptionSetDescription(file),
				progressbar.OptionShowBytes(true),
				progressbar.OptionShowCount(),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(r.w) }),
			)
		}
	}
	switch {
	case r.quiet:
	case r.bar != nil:
		if total != r.max {
			r.max = total
			r.bar.ChangeMax64(total)
		}
		r.bar.Set64(done)
		if done == total {
			r.bar.Finish()
			r.bar, r.quiet = nil, true
		}
	case done == total && total >= 0:
		fmt.Fprintf(r.w, "fetched %s (%s)\n", file, sizeText(total))
		r.quiet = true
	}
}

// finish ends the bar under way.
func (r *fetchReport) finish() {
	if r.bar != nil {
		r.bar.Exit()
		fmt.Fprintln(r.w)
		r.bar = nil
	}
	r.file, r.quiet = "", false
}

// sizeText is a byte count for people: 512 B, 1.5 KiB, 2.0 GiB.
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
