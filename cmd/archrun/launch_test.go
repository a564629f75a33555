package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/archgen/archgen/internal/disttest"
	"github.com/archgen/archgen/internal/npy"
	"github.com/archgen/archgen/parity"
)

// runAsArchrun makes this test binary archrun itself when
// ARCHGEN_ARCHRUN_MAIN is 1 (TestMain calls it), so that launch can start
// copies of it as ranks.
func runAsArchrun() {
	if os.Getenv("ARCHGEN_ARCHRUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
}

// archrun runs this binary as archrun with args, as a real process.
func archrun(t *testing.T, timeout time.Duration, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "ARCHGEN_ARCHRUN_MAIN=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return stdout.String(), stderr.String(), err
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("archrun %q: still running after %s", args, timeout)
		return "", "", nil
	}
}

// mlpPlan splits only the MLP: a plan given with -shard-plan in place of
// the architecture's.
const mlpPlan = "testdata/mlp-shard.json"

func readNpy(t *testing.T, path string) []float32 {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := a.Data.([]float32)
	if !ok {
		t.Fatalf("%s holds %T, want float32", path, a.Data)
	}
	return v
}

// shardCase is a parity case at a level that the tensor-parallel tests
// run over 2 ranks; mlxlm tells whether mlx-lm has a shard method for the
// arch to compare with. A level ending in _float32 is made from the case's
// float32 checkpoint by bench/prepare.py: quantized with float32 scales,
// so that it runs in float32 and a split must keep its logits within
// float32's tolerance. shardOnly compares with mlx-lm's 2 ranks alone: a
// mixture of experts in bfloat16 routes some tokens otherwise once its sums
// are split (mlx-lm's own 2 ranks are 12% of the scale from its one
// process on qwen3_moe/base at q4_g32), so only the same split can match.
type shardCase struct {
	arch, cas, level string
	mlxlm            bool
	shardOnly        bool
}

// shardCases are the cases TestLaunchLogits runs; an arch is added with
// one line per level.
var shardCases = []shardCase{
	{"llama", "base", "float32", true, false},
	{"qwen3", "base", "float32", true, false},
	{"llama", "base", "q4_g64", true, false},
	{"qwen3", "base", "q4_g64", true, false},
	{"glm4", "base", "float32", false, false}, // a fused gate_up projection, split in 2 parts
	// experts split by rows and columns, the router whole; a dense layer
	{"qwen3_moe", "base", "float32", true, false},
	{"llama", "base", "q4_g64_float32", true, false},
	{"qwen3_moe", "base", "q4_g32_float32", true, false}, // 64-wide experts: 2 groups of 32 (1 of 64 cannot split)
	{"qwen3_moe", "base", "q4_g32", true, true},
	// a shared expert whose width is a product (moe_intermediate_size *
	// n_shared_experts): its share is the product on the divided config
	{"glm4_moe", "base", "float32", true, false},
	// sinks split by heads, expert biases, the down bias added once (mlx-lm divides it by 2)
	{"gpt_oss", "yarn_default_layers", "float32", true, false},
	// mxfp4 linears and experts split by their groups of 32, quantized from
	// float32: in bfloat16 this random model's logits move past the level's
	// tolerance between two correct orders of the ops (2 ranks against one
	// and against mlx-lm's 2 ranks alike)
	{"gpt_oss", "yarn_default_layers", "mxfp4_float32", true, false},
}

// shardLevel is tc's checkpoint, mlx-lm's references when the level has
// them (nil for a level made here), and the level's tolerance.
func shardLevel(t *testing.T, tc shardCase) (string, *parity.Dumps, []int32, parity.Tolerance) {
	if !strings.HasSuffix(tc.level, "_float32") {
		dir, want := level(t, tc.arch, tc.cas, tc.level)
		return dir, want, want.Prompt, parity.Tolerances[tc.level]
	}
	src, want := level(t, tc.arch, tc.cas, "float32")
	dir := filepath.Join(t.TempDir(), tc.level)
	py := filepath.Join(parity.Root(), ".deps", "py", "bin", "python")
	cmd := exec.Command(py, filepath.Join(parity.Root(), "bench", "prepare.py"), "derive", src, dir, tc.level)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bench/prepare.py derive %s: %v\n%s", tc.level, err, out)
	}
	return dir, nil, want.Prompt, parity.Tolerances["float32"]
}

// TestLaunchLogits: 2 ranks on loopback, on the architecture's generated
// plan, give the logits of one process and mlx-lm's within the level's
// tolerance, and those of the same checkpoint sharded by mlx-lm itself
// where mlx-lm can shard the arch; each computes in the checkpoint's own
// dtypes, as mlx-lm does.
func TestLaunchLogits(t *testing.T) {
	for _, tc := range shardCases {
		t.Run(tc.arch+"/"+tc.cas+"/"+tc.level, func(t *testing.T) {
			dir, want, prompt, tol := shardLevel(t, tc)
			tmp := t.TempDir()
			tokens := tokenList(prompt)
			one := filepath.Join(tmp, "one.npy")
			if err := run([]string{"logits", "-model", dir, "-dtype", "checkpoint", "-tokens", tokens, "-out", one}, nil, nil); err != nil {
				t.Fatal(err)
			}
			two := filepath.Join(tmp, "two.npy")
			stdout, stderr, err := archrun(t, 2*time.Minute, nil,
				"launch", "-n", "2", "--", "logits", "-model", dir, "-dtype", "checkpoint", "-tokens", tokens, "-out", two)
			if err != nil {
				t.Fatalf("launch: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			got := readNpy(t, two)
			refs := map[string][]float32{"one process's": readNpy(t, one)}
			if want != nil {
				refs["mlx-lm's"] = want.Prefill
			}
			if tc.shardOnly {
				refs = nil
			}
			for name, ref := range refs {
				d, err := parity.Compare(got, ref)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("2 ranks vs %s logits: %.3g of the scale", name, d.Rel())
				if d.Rel() > tol.Rel {
					t.Errorf("2 ranks vs %s logits: %.3g of the scale, tolerance %.3g", name, d.Rel(), tol.Rel)
				}
			}
			if !tc.mlxlm {
				return
			}
			// mlx-lm's own sharding of the checkpoint, on the ring backend
			mlxlm := filepath.Join(tmp, "mlxlm.npy")
			py := filepath.Join(parity.Root(), ".deps", "py", "bin", "python")
			res := disttest.Run(t, 2, "TestMLXLMShardWorker", "", disttest.Options{
				Env: []string{"ARCHGEN_PY=" + py, "ARCHGEN_ARGS=" + strings.Join([]string{dir, tokens, mlxlm}, "\n"),
					"MLX_RING_VERBOSE=1"}, Timeout: 2 * time.Minute})
			for _, r := range res {
				if r.ExitCode != 0 {
					t.Fatalf("mlx-lm rank %d: exit %d\n%s%s", r.Rank, r.ExitCode, r.Stdout, r.Stderr)
				}
			}
			d, err := parity.Compare(got, readNpy(t, mlxlm))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("2 ranks vs mlx-lm's 2 ranks: %.3g of the scale", d.Rel())
			if d.Rel() > tol.Rel {
				t.Errorf("2 ranks vs mlx-lm sharded over 2 ranks: %.3g of the scale, tolerance %.3g", d.Rel(), tol.Rel)
			}
		})
	}
}

// TestMLXLMShardWorker is one rank of mlx-lm's sharded run: it runs
// testdata/mlxlm_shard.py in the rank's environment.
func TestMLXLMShardWorker(t *testing.T) {
	if _, ok := disttest.Worker(); !ok {
		return
	}
	args := strings.Split(os.Getenv("ARCHGEN_ARGS"), "\n")
	cmd := exec.Command(os.Getenv("ARCHGEN_PY"), append([]string{"testdata/mlxlm_shard.py"}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// killed with this rank, should the test kill it
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
}

// TestLaunchGreedy: 2 ranks decode mlx-lm's greedy tokens, and only rank 0
// prints them, on each float32 case's generated plan, and on a -shard-plan
// that replaces llama's.
func TestLaunchGreedy(t *testing.T) {
	type run struct {
		arch, cas string
		extra     []string
	}
	runs := []run{{"llama", "base", []string{"-shard-plan", mlpPlan}}}
	for _, tc := range shardCases {
		if tc.level == "float32" {
			runs = append(runs, run{tc.arch, tc.cas, nil})
		}
	}
	for _, r := range runs {
		dir, want := level(t, r.arch, r.cas, "float32")
		args := append([]string{"launch", "-n", "2", "--", "greedy", "-model", dir, "-tokens", tokenList(want.Prompt),
			"-n", fmt.Sprint(len(want.DecodeTokens))}, r.extra...)
		stdout, stderr, err := archrun(t, 2*time.Minute, nil, args...)
		if err != nil {
			t.Fatalf("launch %s/%s %q: %v\n%s", r.arch, r.cas, r.extra, err, stderr)
		}
		wantLine := strings.ReplaceAll(tokenList(want.DecodeTokens), ",", " ") + "\n"
		if stdout != wantLine {
			t.Errorf("2 ranks of %s/%s %q printed %q, mlx-lm's greedy tokens are %q", r.arch, r.cas, r.extra, stdout, wantLine)
		}
	}
}

// TestLaunchErrors: refusals reach the user from each rank, named; an
// architecture without a plan is refused with the reason, and a
// -shard-plan's counts replace the architecture's.
func TestLaunchErrors(t *testing.T) {
	dir, _ := level(t, "llama", "base", "float32")
	fused, _ := level(t, "phi3", "base", "float32")
	for _, tc := range []struct {
		args []string
		want []string
		not  string
	}{
		{args: []string{"launch", "-n", "2", "--", "greedy", "-model", fused, "-tokens", "1,2"},
			// the rank that fails first is named; launch then kills the other
			want: []string{": " + fused + "/config.json: cannot shard over 2 processes: phi3 has no tensor-parallel plan: " +
				"its fused self_attn.qkv_proj holds q, k and v parts of unequal sizes", "archrun: rank ", "archrun: launch: rank "}},
		{args: []string{"launch", "-n", "3", "--", "greedy", "-model", dir, "-tokens", "1,2"},
			want: []string{"cannot shard over 3 processes: num_attention_heads = 4, num_key_value_heads = 2, intermediate_size = 128: the group size must divide each"}},
		// the real SmolLM2-135M: 9 heads and 3 KV heads, which 2 does not
		// divide; its config is the GGUF's metadata, named by the file
		{args: []string{"launch", "-n", "2", "--", "greedy", "-gguf", smolLM2, "-tokens", "1,2"},
			want: []string{smolLM2 + ": cannot shard over 2 processes: num_attention_heads = 9, num_key_value_heads = 3: the group size must divide each (into at least one per process)\n"},
			not:  "config.json"},
		{args: []string{"launch", "-n", "3", "--", "greedy", "-model", dir, "-tokens", "1,2", "-shard-plan", mlpPlan},
			want: []string{"cannot shard over 3 processes: intermediate_size = 128: the group size must divide each"}, not: "num_attention_heads"},
		{args: []string{"launch", "-n", "2", "--", "list"}, want: []string{"launch needs a command after its flags"}},
	} {
		_, stderr, err := archrun(t, 2*time.Minute, nil, tc.args...)
		if err == nil {
			t.Errorf("archrun %q: no error", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("archrun %q: stderr\n%s\nwant %q", tc.args, stderr, w)
			}
		}
		if tc.not != "" && strings.Contains(stderr, tc.not) {
			t.Errorf("archrun %q: stderr\n%s\nnames %q", tc.args, stderr, tc.not)
		}
	}
}

// TestBadShardPlan: a plan file archrun cannot read is named.
func TestBadShardPlan(t *testing.T) {
	dir, _ := level(t, "llama", "base", "float32")
	plan := filepath.Join(t.TempDir(), "plan.json")
	for body, want := range map[string]string{
		`{"linears": {"mlp.up_proj": "split"}}`: `-shard-plan ` + plan + `: linears.mlp.up_proj: role "split", want all-to-sharded, sharded-to-all or replicated`,
		`{"linear": {}}`:                        `-shard-plan ` + plan + `: want {"linears": {name: role}, "counts": [config key]}: json: unknown field "linear"`,
		`{"linears": {}, "parts": {"x": 2}}`:    `-shard-plan ` + plan + `: parts.x: want a count of at least 1 for a linear that linears lists`,
	} {
		if err := os.WriteFile(plan, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		err := run([]string{"greedy", "-model", dir, "-tokens", "1", "-shard-plan", plan}, nil, nil)
		if err == nil || err.Error() != want {
			t.Errorf("plan %s: %v\nwant %s", body, err, want)
		}
	}
}

// TestKilledRank: a rank killed while the group decodes makes the other
// exit at once with the ring's error, named by rank.
func TestKilledRank(t *testing.T) {
	dir, want := level(t, "llama", "base", "float32")
	hostfile := disttest.Hostfile(t, 2)
	var procs [2]*exec.Cmd
	var stderr [2]lockedBuffer
	done := make(chan int, 2)
	for r := range procs {
		p := exec.Command(os.Args[0], "greedy", "-model", dir, "-tokens", tokenList(want.Prompt), "-n", "1000000")
		p.Env = append(os.Environ(), "ARCHGEN_ARCHRUN_MAIN=1", fmt.Sprintf("MLX_RANK=%d", r), "MLX_HOSTFILE="+hostfile,
			"ARCHGEN_DIST_TIMEOUT=10s", "MLX_RING_VERBOSE=1")
		p.Stderr = &stderr[r]
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		procs[r] = p
		go func(r int) { p.Wait(); done <- r }(r)
	}
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
		}
	}()
	// the ring is up (MLX_RING_VERBOSE says so), then the tiny model loads
	// in milliseconds: after 2s more the group is decoding
	for start := time.Now(); !strings.Contains(stderr[0].String(), "Rank 0 connecting to 1"); {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("rank 0 did not join the group in 60s:\n%s", stderr[0].String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if err := procs[1].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for range 2 {
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			t.Fatalf("rank 0 still running 40s after rank 1 was killed\n%s", stderr[0].String())
		}
	}
	t.Logf("rank 0 ended %s after rank 1 was killed", time.Since(killed))
	if code := procs[0].ProcessState.ExitCode(); code != 1 {
		t.Errorf("rank 0 exited with %d (%s), want 1", code, procs[0].ProcessState)
	}
	// Most often the ring's error reaches the evaluation; sometimes the
	// ring fails its pending tasks without the evaluation returning, and
	// the group's timeout ends the wait.
	lost := regexp.MustCompile(`archrun: rank 0: .*\[ring\] connection to a peer was lost`)
	waited := "rank 0 of 2 (any): an evaluation on stream"
	if e := stderr[0].String(); !lost.MatchString(e) && !strings.Contains(e, waited) {
		t.Errorf("rank 0's stderr:\n%s\nwant the ring's lost-peer error or the group's timeout", e)
	}
}

// lockedBuffer is a bytes.Buffer a process writes while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLaunchHostfile: with mlx.launch's hostfile, launch prints each
// host's command: the ring's hostfile written in place, then the rank's
// environment and the command, quoted for a shell.
func TestLaunchHostfile(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts.json")
	os.WriteFile(hosts, []byte(`{"envs": ["OMP_NUM_THREADS=1"], "hosts": [{"ssh": "m1", "ips": ["10.0.0.1"]}, {"ssh": "m2", "ips": ["10.0.0.2"]}]}`), 0o644)
	var out bytes.Buffer
	if err := run([]string{"launch", "-hostfile", hosts, "-port", "4000", "--", "generate", "-model", "/m/my model", "-prompt", "it's"}, &out, nil); err != nil {
		t.Fatal(err)
	}
	ring := `'[["10.0.0.1:4000"],["10.0.0.2:4001"]]'`
	want := "# 2 ranks; run each line on its host (as `ssh HOST '...'`), in the same directory\n" +
		"# rank 0 on m1\n" +
		"printf '%s\\n' " + ring + " > /tmp/archgen-ring.json && env OMP_NUM_THREADS=1 MLX_RANK=0 MLX_HOSTFILE=/tmp/archgen-ring.json archrun generate -model '/m/my model' -prompt 'it'\\''s'\n" +
		"# rank 1 on m2\n" +
		"printf '%s\\n' " + ring + " > /tmp/archgen-ring.json && env OMP_NUM_THREADS=1 MLX_RANK=1 MLX_HOSTFILE=/tmp/archgen-ring.json archrun generate -model '/m/my model' -prompt 'it'\\''s'\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
	os.WriteFile(hosts, []byte(`[{"ssh": "m1"}]`), 0o644)
	err := run([]string{"launch", "-hostfile", hosts, "--", "greedy"}, &out, nil)
	if err == nil || !strings.Contains(err.Error(), `host 0 ("m1") has no ips; the ring backend connects to IP addresses`) {
		t.Errorf("a host without ips: %v", err)
	}
	os.WriteFile(hosts, []byte(`"m1,m2"`), 0o644)
	err = run([]string{"launch", "-hostfile", hosts, "--", "greedy"}, &out, nil)
	if err == nil || !strings.Contains(err.Error(), `want mlx.launch's hostfile, a JSON list of {"ssh": name, "ips": [ip]} (or {"hosts": [...]})`) {
		t.Errorf("not a hostfile: %v", err)
	}
}
