// Command gorun measures archgen's generated forward passes on one model
// directory the way bench/mlxlm_run.py measures mlx-lm's: load time, then
// for each prompt of the prompts file a warm-up and N measured runs of
// generate.Tokens (greedy, no stop tokens, the same decode steps), and
// prints the figures as one JSON object on stdout.
//
//	go run ./bench/gorun -model dir -prompts prompts.json -runs 5 -gen 128
//
// Started with MLX_RANK and MLX_HOSTFILE set (as archrun launch starts its
// ranks), it is one rank of a group: it loads its shard of the model
// (nn.Options.Group), every rank runs the same prompts, and each prints its
// own figures, with the bytes its all_sum ops took in over each run's
// prefill and decode. Every process reports its peak resident set.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// Prompt is one entry of the prompts file: a name, the token ids, and how
// many tokens to generate after them.
type Prompt struct {
	Name   string  `json:"name"`
	Tokens []int32 `json:"tokens"`
	Gen    int     `json:"gen"`
	// The warm-up runs' prompt length and tokens generated, when shorter
	// than the measured runs' (0: the same).
	WarmTokens int `json:"warm_tokens"`
	WarmGen    int `json:"warm_gen"`
}

// warm is p as its warm-up runs run it.
func (p Prompt) warm() Prompt {
	if p.WarmTokens > 0 && p.WarmTokens < len(p.Tokens) {
		p.Tokens = p.Tokens[:p.WarmTokens]
	}
	if p.WarmGen > 0 && p.WarmGen < p.Gen {
		p.Gen = p.WarmGen
	}
	return p
}

// Run is one measured generation.
type Run struct {
	PromptTPS   float64 `json:"prompt_tps"`
	GenerateTPS float64 `json:"generate_tps"`
	TTFT        float64 `json:"ttft_s"`
	PeakMemory  uint64  `json:"peak_memory"`
	Tokens      int     `json:"tokens"`
	// In a group: the all_sum ops the prompt's prefill (all its tokens
	// but the last, PrefillTokens, in chunks of generate's PrefillStep)
	// and the decode steps (DecodeCalls forward calls of one token each,
	// the first on the prompt's last token) built, and the bytes of their
	// inputs, i.e. what this rank contributes to them.
	PrefillSums     int64 `json:"prefill_all_sums,omitempty"`
	PrefillSumBytes int64 `json:"prefill_all_sum_bytes,omitempty"`
	DecodeSums      int64 `json:"decode_all_sums,omitempty"`
	DecodeSumBytes  int64 `json:"decode_all_sum_bytes,omitempty"`
	PrefillTokens   int   `json:"prefill_tokens,omitempty"`
	DecodeCalls     int   `json:"decode_calls,omitempty"`
}

// Result is what gorun prints.
type Result struct {
	Side    string           `json:"side"`
	Model   string           `json:"model"`
	Dtype   string           `json:"dtype"`
	Cache   string           `json:"cache_dtype"` // what the KV cache held keys and values in
	Nbytes  int              `json:"weight_bytes"`
	LoadS   []float64        `json:"load_s"`
	Runs    map[string][]Run `json:"runs"`
	Outputs map[string][]int `json:"outputs"` // the tokens of the last run, per prompt
	MLX     string           `json:"mlx"`
	// Kernels names the CPU kernels' instruction set and tile unit mode
	// (runtime/mlx's NativeISA and NativeTiles), which the figures hold for.
	Kernels  string `json:"kernels"`
	Warmups  int    `json:"warmups"`
	Measured int    `json:"measured"`
	// The group this process ran in (rank 0 of 1 alone).
	Rank int `json:"rank"`
	Size int `json:"size"`
	// The process's peak resident set (getrusage), in bytes, and the CPU
	// time it took in user and system mode, all at the end.
	PeakRSS int64   `json:"peak_rss"`
	UserS   float64 `json:"user_s"`
	SysS    float64 `json:"sys_s"`
}

func main() {
	dir := flag.String("model", "", "model directory, or a .gguf file")
	promptsPath := flag.String("prompts", "", "JSON list of prompts ({name, tokens, gen})")
	runs := flag.Int("runs", 5, "measured runs per prompt")
	warmups := flag.Int("warmup", 1, "warm-up runs per prompt")
	loads := flag.Int("loads", 5, "measured loads (after one warm-up load)")
	only := flag.String("only", "", "run only the prompts of these names (comma-separated)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the measured runs here")
	prefillStep := flag.Int("prefill-step", 0, "prompt tokens per forward call (0: generate's default)")
	dtype := flag.String("dtype", "", "compute dtype: float32, bfloat16, float16 or checkpoint (default: archgen's, float32 on the CPU)")
	kvDtype := flag.String("kv-dtype", "", "what the KV cache holds: float32, bfloat16 or float16 (default: archgen's, the checkpoint's half precision under float32 compute)")
	flag.Parse()
	var opts nn.Options
	if *dtype != "" {
		dt, err := nn.ParseDtype(*dtype)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gorun: -"+err.Error())
			os.Exit(2)
		}
		opts.Dtype = dt
	}
	var ko kv.Options
	if *kvDtype != "" {
		dt, err := mlx.ParseDtype(*kvDtype)
		if ko.Dtype = dt; err != nil || ko.Check() != nil {
			fmt.Fprintf(os.Stderr, "gorun: -kv-dtype %q: want float32, bfloat16 or float16\n", *kvDtype)
			os.Exit(2)
		}
	}
	if err := run(*dir, *promptsPath, *runs, *warmups, *loads, *only, *cpuprofile, *prefillStep, opts, ko); err != nil {
		fmt.Fprintln(os.Stderr, "gorun:", err)
		os.Exit(1)
	}
}

func run(dir, promptsPath string, runs, warmups, loads int, only, cpuprofile string, prefillStep int, opts nn.Options, ko kv.Options) error {
	if dir == "" || promptsPath == "" {
		return fmt.Errorf("-model and -prompts are required")
	}
	data, err := os.ReadFile(promptsPath)
	if err != nil {
		return err
	}
	var prompts []Prompt
	if err := json.Unmarshal(data, &prompts); err != nil {
		return fmt.Errorf("%s: %v", promptsPath, err)
	}
	res := Result{Side: "archgen", Model: dir, Runs: map[string][]Run{}, Outputs: map[string][]int{},
		MLX: mlx.Version(), Warmups: warmups, Measured: runs, Kernels: kernels()}

	var group *mlx.Group
	_, hasRank := os.LookupEnv("MLX_RANK")
	_, hasHost := os.LookupEnv("MLX_HOSTFILE")
	res.Size = 1
	if hasRank || hasHost {
		if group, err = mlx.InitGroup(mlx.GroupOptions{Strict: true}); err != nil {
			return err
		}
		opts.Group = group
		res.Rank, res.Size = group.Rank(), group.Size()
	}

	var m registry.Model
	for i := 0; i <= loads; i++ {
		if m != nil {
			m.Free()
			mlx.ClearCache()
		}
		t := time.Now()
		m, err = load(dir, opts)
		if err != nil {
			return err
		}
		if i > 0 {
			res.LoadS = append(res.LoadS, time.Since(t).Seconds())
		}
	}
	defer m.Free()
	info := m.Info()
	res.Dtype = info.Dtype.String()
	switch {
	case ko.Dtype != 0:
		res.Cache = ko.Dtype.String()
	case info.CacheDtype != 0:
		res.Cache = info.CacheDtype.String()
	default:
		res.Cache = res.Dtype
	}
	res.Nbytes = info.Nbytes

	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		// Started after the warm-ups of the first prompt, below.
		defer pprof.StopCPUProfile()
	}
	profiling := false
	for _, p := range prompts {
		if only != "" && !slices.Contains(strings.Split(only, ","), p.Name) {
			continue
		}
		for i := 0; i < warmups+runs; i++ {
			if i == warmups && cpuprofile != "" && !profiling {
				f, _ := os.OpenFile(cpuprofile, os.O_WRONLY, 0)
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				profiling = true
			}
			q := p
			if i < warmups {
				q = p.warm()
			}
			var out []int
			var sums0, bytes0, sums1, bytes1 int64
			if group != nil {
				sums0, bytes0 = group.AllSumStats()
			}
			gopts := generate.Options{MaxTokens: q.Gen, Vocab: info.VocabSize, PrefillStep: prefillStep,
				OnPrompt: func(done, total int) {
					if group != nil && done == total-1 {
						sums1, bytes1 = group.AllSumStats()
					}
				}}
			if ko.Dtype != 0 {
				if gopts.Caches, err = m.NewCachesWith(ko); err != nil {
					return err
				}
			}
			st, err := generate.Tokens(context.Background(), m, q.Tokens, gopts,
				func(t int32) error { out = append(out, int(t)); return nil })
			for _, c := range gopts.Caches {
				c.Free()
			}
			if err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
			if st.Tokens != q.Gen {
				return fmt.Errorf("%s: generated %d tokens, want %d", p.Name, st.Tokens, q.Gen)
			}
			mlx.ClearCache()
			if i < warmups {
				continue
			}
			r := Run{
				PromptTPS:   st.PromptTPS(),
				GenerateTPS: st.GenerateTPS(),
				TTFT:        st.FirstTokenDelay.Seconds(),
				PeakMemory:  st.PeakMemory,
				Tokens:      st.Tokens,
			}
			if group != nil {
				sums2, bytes2 := group.AllSumStats()
				if len(q.Tokens) == 1 { // no prefill call
					sums1, bytes1 = sums0, bytes0
				}
				r.PrefillSums, r.PrefillSumBytes = sums1-sums0, bytes1-bytes0
				r.DecodeSums, r.DecodeSumBytes = sums2-sums1, bytes2-bytes1
				r.PrefillTokens, r.DecodeCalls = len(q.Tokens)-1, st.Tokens
			}
			res.Runs[p.Name] = append(res.Runs[p.Name], r)
			res.Outputs[p.Name] = out
		}
	}
	for name, rs := range res.Runs {
		var pt, gt []float64
		for _, r := range rs {
			pt = append(pt, r.PromptTPS)
			gt = append(gt, r.GenerateTPS)
		}
		fmt.Fprintf(os.Stderr, "gorun: %s: %s: prompt %.1f tok/s, decode %.1f tok/s (medians of %d)\n",
			dir, name, median(pt), median(gt), len(rs))
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		res.PeakRSS = ru.Maxrss * 1024 // kilobytes on Linux
		res.UserS = time.Duration(ru.Utime.Nano()).Seconds()
		res.SysS = time.Duration(ru.Stime.Nano()).Seconds()
	}
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(res)
}

// median of xs (0 when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// load is the model at path: a model directory, or a GGUF file as
// archgen.Load reads it (its tensors held in their own types).
func load(path string, opts nn.Options) (registry.Model, error) {
	if !strings.HasSuffix(path, ".gguf") {
		return registry.Load(path, opts)
	}
	g, err := gguf.Read(path, opts.Stream, registry.Archs())
	if err != nil {
		return nil, err
	}
	m, err := g.Load(opts, registry.Load)
	if err != nil {
		g.Free()
		return nil, err
	}
	return m, nil
}

// kernels says which instructions runtime/mlx's CPU kernels run: the
// AVX2 or AVX-512 level, and the tile unit's mode for prompts' products.
func kernels() string {
	isa := map[int]string{0: "libmlx", mlx.ISAAVX2: "avx2", mlx.ISAAVX512: "avx512"}[mlx.NativeISA()]
	switch t := mlx.NativeTiles(); t {
	case mlx.TilesOff:
		return isa
	case mlx.TilesAuto:
		return isa + "+amx"
	default:
		return fmt.Sprintf("%s+amx(%d terms)", isa, t)
	}
}
