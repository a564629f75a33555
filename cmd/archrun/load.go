package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/tokenizer"
)

// source is where a model comes from: a directory or a GGUF file.
type source struct {
	dir, gguf, dtype string
	memory           string
	limit            uint64 // bytes; 0 for none
}

func (s *source) flags(fs *flag.FlagSet, withGGUF bool) {
	fs.StringVar(&s.dir, "model", "", "model directory (config.json and safetensors)")
	if withGGUF {
		fs.StringVar(&s.gguf, "gguf", "", "GGUF file, instead of -model")
	}
	fs.StringVar(&s.dtype, "dtype", "", "compute dtype: float32, float16 or bfloat16 (default: the checkpoint's)")
	fs.StringVar(&s.memory, "memory-limit", "", "stop with an error when the weights or MLX's active memory pass this size (8GB, 512MiB, bytes)")
}

func (s *source) check() error {
	switch {
	case s.dir == "" && s.gguf == "":
		return usagef("-model DIR is required")
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
	return nil
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
		dt, err := mlx.ParseDtype(s.dtype)
		if err != nil || !dt.IsFloat() || dt == mlx.Float64 {
			return opts, usagef("-dtype %q: want float32, float16 or bfloat16", s.dtype)
		}
		opts.Dtype = dt
	}
	if s.limit > 0 {
		mlx.SetMemoryLimit(s.limit)
		opts.MemoryLimit = s.limit
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
	if !term.IsTerminal(int(os.Stderr.Fd())) {
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

// load opens the model, and its tokenizer when withTokenizer.
func (s *source) load(withTokenizer bool) (nn.Model, *tokenizer.Pretrained, error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	opts, err := s.options()
	if err != nil {
		return nil, nil, err
	}
	if s.gguf != "" {
		return loadGGUF(s.gguf, opts, withTokenizer)
	}
	m, err := registry.Load(s.dir, opts)
	if err != nil {
		return nil, nil, err
	}
	if !withTokenizer {
		return m, nil, nil
	}
	tok, err := tokenizer.Load(s.dir)
	if err != nil {
		m.Free()
		return nil, nil, err
	}
	return m, tok, nil
}

func loadGGUF(path string, opts nn.Options, withTokenizer bool) (nn.Model, *tokenizer.Pretrained, error) {
	var spin *progressbar.ProgressBar
	if newBar() != nil {
		spin = progressbar.NewOptions(-1, progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("reading "+path), progressbar.OptionClearOnFinish(),
			progressbar.OptionSpinnerType(14))
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					spin.Finish()
					return
				case <-t.C:
					spin.Add(1)
				}
			}
		}()
	}
	g, err := gguf.Read(path, opts.Stream, registry.Archs())
	if err != nil {
		return nil, nil, err
	}
	var tok *tokenizer.Pretrained
	if withTokenizer {
		if tok, err = g.Tokenizer(); err != nil {
			g.Free()
			return nil, nil, err
		}
	}
	m, err := g.Load(opts, registry.Load)
	if err != nil {
		return nil, nil, err
	}
	return m, tok, nil
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
