package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/tokenizer/chat"
)

// source is where a model comes from: a directory, a GGUF file or a Hugging
// Face repo id or cache folder (see archgen.Resolve).
type source struct {
	dir, gguf, dtype string
	memory           string
	limit            uint64 // bytes; 0 for none
	plan             string
	group            *mlx.Group // the group this process runs its shard in, if any

	// The chat template's bounds (see chat.Bounds).
	templateTime                   time.Duration
	templateMemory, templateOutput string
	templateBounds                 chat.Bounds
	trustTemplate                  bool
	chatTemplate                   string // a file holding a chat template to use instead of the model's

	offline bool // read a repo id from the Hugging Face cache alone, downloading nothing
}

func (s *source) flags(fs *flag.FlagSet, withGGUF bool) {
	const use = "the model: a model directory, a .gguf file, or a Hugging Face repo id (ORG/NAME[@REVISION], downloaded into the Hugging Face cache when it lacks it) or cache folder"
	fs.StringVar(&s.dir, "model", "", use)
	fs.StringVar(&s.dir, "m", "", "short for -model")
	if withGGUF {
		fs.StringVar(&s.gguf, "gguf", "", "a GGUF file (-model takes one too)")
	}
	fs.StringVar(&s.dtype, "dtype", "", "compute dtype: float32, bfloat16, float16, or checkpoint: its own dtypes, mlx-lm's arithmetic (default float32 on the CPU: faster there than half precision, and at least as accurate as mlx-lm; where the CPU has a tile unit (AMX), prompts' products run on it with x to 16 bits of its mantissa and W's values exact, ARCHGEN_MLX_TILES=0 turns it off)")
	fs.StringVar(&s.memory, "memory-limit", "", "stop with an error when the weights or MLX's active memory pass this size (8GB, 512MiB, bytes)")
	fs.StringVar(&s.plan, "shard-plan", "", "a tensor-parallel plan (JSON) to use instead of the architecture's, in a group")
	fs.DurationVar(&s.templateTime, "template-time", chat.DefaultBounds.Time, "the chat template's time for one render, in its renderer process")
	fs.StringVar(&s.templateMemory, "template-memory", fmt.Sprintf("%dMiB", chat.DefaultBounds.Memory>>20), "the chat template renderer's memory")
	fs.StringVar(&s.templateOutput, "template-output", fmt.Sprintf("%dMiB", chat.DefaultBounds.Output>>20), "the most text one render of the chat template may produce")
	fs.BoolVar(&s.trustTemplate, "trust-template", false, "render the chat template in this process, with no bound on its work (for a template you wrote or checked)")
	fs.StringVar(&s.chatTemplate, "chat-template", "", "a file holding a chat template (Jinja) to use instead of the model's own")
	fs.BoolVar(&s.offline, "offline", false, "read a repo id from the Hugging Face cache alone, downloading nothing (as HF_HUB_OFFLINE=1)")
}

// path is the model's path, given by -model or -gguf.
func (s *source) path() string {
	if s.gguf != "" {
		return s.gguf
	}
	return s.dir
}

func (s *source) check() error {
	switch {
	case s.dir == "" && s.gguf == "":
		return usagef("-model is required: a model directory, a .gguf file or a Hugging Face repo id")
	case s.dir != "" && s.gguf != "":
		return usagef("-model and -gguf exclude each other")
	}
	if s.memory != "" {
		n, err := parseSize(s.memory)
		if err != nil {
			return usagef("-memory-limit %q: %v", s.memory, err)
		}
		s.limit = n
	}
	if s.dtype != "" {
		if _, err := nn.ParseDtype(s.dtype); err != nil {
			return usagef("-%v", err)
		}
	}
	s.templateBounds = chat.Bounds{Time: s.templateTime}
	if s.templateTime <= 0 {
		return usagef("-template-time %v: want a positive duration", s.templateTime)
	}
	for _, f := range []struct {
		flag, v string
		dst     func(uint64)
	}{
		{"template-memory", s.templateMemory, func(n uint64) { s.templateBounds.Memory = int64(n) }},
		{"template-output", s.templateOutput, func(n uint64) { s.templateBounds.Output = int(n) }},
	} {
		if f.v == "" {
			continue
		}
		n, err := parseSize(f.v)
		if err != nil || n == 0 {
			return usagef("-%s %q: want a positive size (512MiB, 4MiB, bytes)", f.flag, f.v)
		}
		f.dst(n)
	}
	return nil
}

// computeLine says which dtype the model computed in (dt, its logits'),
// and why.
func (s *source) computeLine(dt mlx.Dtype) string {
	switch s.dtype {
	case "":
		if dt == mlx.Float32 {
			line := "Compute: float32, the default on the CPU (half-precision weights are read as stored and widened; " +
				"faster here than half-precision arithmetic and at least as accurate as mlx-lm's; -dtype checkpoint for mlx-lm's arithmetic)"
			if mlx.NativeTiles() != mlx.TilesOff {
				line += "; prompts' products on this CPU's tile unit (AMX: bfloat16 parts summed in float32, x to 16 bits " +
					"of its mantissa, W's values exact; ARCHGEN_MLX_TILES=0 for the float32 kernels)"
			}
			return line
		}
		return fmt.Sprintf("Compute: %s, the checkpoint's", dt)
	case "checkpoint":
		return fmt.Sprintf("Compute: the checkpoint's own dtypes (-dtype checkpoint; logits in %s), as mlx-lm computes", dt)
	}
	return fmt.Sprintf("Compute: %s (-dtype %s)", dt, s.dtype)
}

// cacheLine says what the KV cache held keys and values in (asked: the
// -kv-dtype flag's, 0 when not given), and why.
func cacheLine(info nn.Info, asked mlx.Dtype) string {
	switch {
	case asked != 0:
		return fmt.Sprintf("KV cache: %s (-kv-dtype %s)", asked, asked)
	case info.CacheDtype != 0:
		return fmt.Sprintf("KV cache: %s, the checkpoint's, as mlx-lm holds it: half the bytes of float32 to hold and read (-kv-dtype float32 for float32)", info.CacheDtype)
	}
	return fmt.Sprintf("KV cache: %s, as computed", info.Dtype)
}

// units are the suffixes parseSize knows, upper-cased.
var units = map[string]float64{
	"": 1, "B": 1,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40,
}

// parseSize reads a byte count: a number and an optional unit (KB, MB, GB,
// TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	unit, ok := units[strings.ToUpper(strings.TrimSpace(t[i:]))]
	v, err := strconv.ParseFloat(t[:i], 64)
	if !ok || err != nil || v*unit < 1 || v*unit >= 1<<63 {
		return 0, errors.New("want a positive size such as 8GB, 512MiB or a number of bytes")
	}
	return uint64(v * unit), nil
}

func (s *source) options() (nn.Options, error) {
	var opts nn.Options
	if s.dtype != "" {
		opts.Dtype, _ = nn.ParseDtype(s.dtype) // checked by check
	}
	if s.limit > 0 {
		mlx.SetMemoryLimit(s.limit)
		opts.MemoryLimit = s.limit
	}
	if s.plan != "" {
		data, err := os.ReadFile(s.plan)
		if err != nil {
			return opts, err
		}
		if opts.Shard, err = nn.ParseShardPlan(data); err != nil {
			return opts, fmt.Errorf("-shard-plan %s: %w", s.plan, err)
		}
	}
	if inGroup() {
		g, err := mlx.InitGroup(mlx.GroupOptions{Strict: true})
		if err != nil {
			return opts, err
		}
		s.group, opts.Group = g, g
	}
	if bar := newBar(); bar != nil {
		opts.Progress = func(done, total int64) {
			bar.ChangeMax64(total)
			bar.Set64(done)
			if done == total {
				bar.Finish()
			}
		}
	}
	return opts, nil
}

// newBar is a progress bar on standard error when that is a terminal.
func newBar() *progressbar.ProgressBar {
	if !term.IsTerminal(int(os.Stderr.Fd())) || groupRank() > 0 {
		return nil
	}
	return progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription("loading weights"),
		progressbar.OptionShowBytes(true),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond),
	)
}

// loadDraft loads a -draft-model (path; nil when it is empty) as s loads
// its model (its compute dtype, memory limit and download settings), with
// its tokenizer, which must be the model's.
func (s *source) loadDraft(ctx context.Context, path string) (*archgen.Model, error) {
	if path == "" {
		return nil, nil
	}
	if s.group != nil {
		return nil, usagef("-draft-model does not run in a group of processes")
	}
	d := *s
	d.dir, d.gguf, d.chatTemplate, d.plan = path, "", "", ""
	m, err := d.load(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("-draft-model: %w", err)
	}
	return m, nil
}

// load opens the model, with its tokenizer when withTokenizer, through
// archgen.Load; ctx cancels it before the weights are read.
func (s *source) load(ctx context.Context, withTokenizer bool) (*archgen.Model, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	path := s.path()
	if s.gguf != "" && !strings.HasSuffix(s.gguf, ".gguf") {
		if st, err := os.Stat(s.gguf); err == nil && st.IsDir() {
			return nil, fmt.Errorf("-gguf %s: a directory; -gguf takes a .gguf file (pass a directory with -model)", s.gguf)
		}
	}
	o, err := s.options()
	if err != nil {
		return nil, err
	}
	opts := archgen.LoadOptions{Options: o, NoTokenizer: !withTokenizer,
		TemplateBounds: s.templateBounds, TrustTemplate: s.trustTemplate}
	if !s.offline && s.gguf == "" {
		// A repo id the cache lacks is downloaded first, its files shown
		// as pull shows them.
		report := newFetchReport(os.Stderr)
		defer report.finish()
		opts.Download, opts.Hub.Progress = true, report.progress
	}
	if s.chatTemplate != "" {
		data, err := os.ReadFile(s.chatTemplate)
		if err != nil {
			return nil, fmt.Errorf("-chat-template: %w", err)
		}
		opts.ChatTemplate, opts.ChatTemplateSource = string(data), s.chatTemplate
	}
	if r, err := archgen.Resolve(path); err == nil && r.Kind == archgen.KindGGUF {
		defer spin("reading " + r.Path)()
	}
	return archgen.Load(ctx, path, opts)
}

// spin shows a spinner on a terminal until the function it returns is
// called: MLX reads a GGUF file without telling how far it is.
func spin(what string) func() {
	if newBar() == nil {
		return func() {}
	}
	bar := progressbar.NewOptions(-1, progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(what), progressbar.OptionClearOnFinish(),
		progressbar.OptionSpinnerType(14))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				bar.Finish()
				return
			case <-t.C:
				bar.Add(1)
			}
		}
	}()
	return func() { close(stop); <-done }
}

// checkTokens refuses ids the model has no embedding for.
func checkTokens(tokens []int32, vocab int) error {
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("token %d (position %d) is outside the vocabulary of %d", t, i, vocab)
		}
	}
	return nil
}
