// Package disttest runs a test's scenario in several real processes that
// form an MLX group on loopback, as mlx.launch would start them: each with
// MLX_RANK and an MLX_HOSTFILE listing free 127.0.0.1 ports.
//
// A test calls Run with the name of a worker test in the same package; the
// worker test does nothing unless Worker reports that it runs as a rank,
// then does its part and reports with Report.
package disttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	envWorker = "ARCHGEN_DISTTEST_WORKER"
	envCase   = "ARCHGEN_DISTTEST_CASE"
	resultTag = "DISTTEST-RESULT: "
)

// Worker reports whether this process runs as a rank of Run, and the case
// it was asked to run.
func Worker() (string, bool) {
	if os.Getenv(envWorker) != "1" {
		return "", false
	}
	return os.Getenv(envCase), true
}

// Report prints a rank's result, which Run hands back as Result.Value.
func Report(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s%s\n", resultTag, b)
}

// FreePorts finds n free TCP ports on 127.0.0.1, held together so they
// differ, then released for the ranks to listen on. They are drawn at
// random below the kernel's ephemeral range (32768 and up on Linux), so
// that the sockets other processes open meanwhile (a parallel test's
// connections and listeners on port 0) cannot take them before the ranks
// do.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free ports in [%d, %d)", n, portLo, portHi)
		}
		p := portLo + rand.IntN(portHi-portLo)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports
}

const portLo, portHi = 20000, 32000

// Hostfile writes the ring backend's hostfile for n ranks on free
// loopback ports into a temporary directory and returns its path.
func Hostfile(t testing.TB, n int) string {
	t.Helper()
	var hosts [][]string
	for _, p := range FreePorts(t, n) {
		hosts = append(hosts, []string{"127.0.0.1:" + strconv.Itoa(p)})
	}
	b, _ := json.Marshal(hosts)
	path := filepath.Join(t.TempDir(), "hostfile.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Result is what one rank did.
type Result struct {
	Rank     int
	Stdout   string
	Stderr   string
	ExitCode int // -1 when killed
	Elapsed  time.Duration
	Value    json.RawMessage // what the rank passed to Report; nil if nothing
}

// Decode reads the rank's reported value into v.
func (r Result) Decode(t testing.TB, v any) {
	t.Helper()
	if r.Value == nil {
		t.Fatalf("rank %d reported nothing (exit %d)\nstdout:\n%s\nstderr:\n%s", r.Rank, r.ExitCode, r.Stdout, r.Stderr)
	}
	if err := json.Unmarshal(r.Value, v); err != nil {
		t.Fatalf("rank %d: %v", r.Rank, err)
	}
}

// Options tune Run.
type Options struct {
	Env      []string      // more environment for every rank
	Timeout  time.Duration // the whole run's bound; default 60s
	Hostfile string        // default: Hostfile(t, n)
	// Ranks are the ranks to start; default all n. A rank left out lets
	// a test see the others wait for it.
	Ranks []int
	// WaitFor, when set, is the only rank whose end Run waits for; the
	// others are then killed.
	WaitFor *int
}

// Run starts this test binary n times as the ranks of a group, each
// running the worker test named worker with the case name, and waits for
// them. Processes still running at the timeout are killed (ExitCode -1).
func Run(t testing.TB, n int, worker, name string, opts Options) []Result {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.Hostfile == "" {
		opts.Hostfile = Hostfile(t, n)
	}
	ranks := opts.Ranks
	if ranks == nil {
		for r := 0; r < n; r++ {
			ranks = append(ranks, r)
		}
	}
	type proc struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
		done           chan struct{}
		start          time.Time
		elapsed        time.Duration
	}
	procs := make([]*proc, len(ranks))
	for i, r := range ranks {
		p := &proc{done: make(chan struct{})}
		p.cmd = exec.Command(os.Args[0], "-test.run=^"+worker+"$", "-test.count=1", "-test.v=false")
		p.cmd.Env = append(os.Environ(), envWorker+"=1", envCase+"="+name,
			"MLX_RANK="+strconv.Itoa(r), "MLX_HOSTFILE="+opts.Hostfile)
		p.cmd.Env = append(p.cmd.Env, opts.Env...)
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		p.start = time.Now()
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.cmd.Wait()
			p.elapsed = time.Since(p.start)
			close(p.done)
		}()
		procs[i] = p
	}
	deadline := time.After(opts.Timeout)
	for i, p := range procs {
		if opts.WaitFor != nil && ranks[i] != *opts.WaitFor {
			continue
		}
		select {
		case <-p.done:
		case <-deadline:
			t.Errorf("rank %d still running after %s: killed", ranks[i], opts.Timeout)
			deadline = closed()
		}
	}
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
	out := make([]Result, len(procs))
	for i, p := range procs {
		res := Result{Rank: ranks[i], Stdout: p.stdout.String(), Stderr: p.stderr.String(),
			ExitCode: p.cmd.ProcessState.ExitCode(), Elapsed: p.elapsed}
		sc := bufio.NewScanner(strings.NewReader(res.Stdout))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), resultTag); ok {
				res.Value = json.RawMessage(v)
			}
		}
		out[i] = res
	}
	return out
}

func closed() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}
