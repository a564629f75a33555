package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// The commands launch runs over a group.
var launchable = map[string]bool{"generate": true, "logits": true, "greedy": true}

// launch starts -n copies of a command on this machine as the ranks of an
// MLX group over loopback (the ring backend), or prints the command each
// host of a hostfile runs.
func (a *app) launch(args []string) error {
	fs := a.flags("launch", "[-n N | -hostfile F] [-timeout D] -- generate|logits|greedy ...",
		"Runs a command over a group of processes, each holding its share of the model (tensor parallelism on MLX's ring backend):\n-n processes on this machine over loopback, or, with -hostfile, prints the command each host runs. Only rank 0 prints.")
	n := fs.Int("n", 2, "processes to start on this machine")
	hostfile := fs.String("hostfile", "", "mlx.launch's hostfile (hosts with ssh names and ips): print each host's command instead")
	port := fs.Int("port", 32323, "with -hostfile: the ring's first port, one more per rank as mlx.launch counts")
	timeout := fs.Duration("timeout", 0, "how long a process waits for its peers (default 2m, or ARCHGEN_DIST_TIMEOUT)")
	fs.rest = true
	if err := a.parse(fs, args); err != nil {
		return err
	}
	cmd := fs.Args()
	if len(cmd) == 0 || !launchable[cmd[0]] {
		return usagef("launch needs a command after its flags: launch -n N -- generate|logits|greedy ...")
	}
	var env []string
	if *timeout > 0 {
		env = append(env, "ARCHGEN_DIST_TIMEOUT="+timeout.String())
	}
	if *hostfile != "" {
		return a.printHostCommands(*hostfile, *port, cmd, env)
	}
	if *n < 1 {
		return usagef("-n %d: want at least 1 process", *n)
	}
	if !mlx.DistributedAvailable("ring") {
		return errors.New("launch: this libmlx has no ring backend")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "archrun-launch")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ring, err := loopbackRing(*n)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "hostfile.json")
	if err := os.WriteFile(path, ring, 0o644); err != nil {
		return err
	}
	// "-prompt -" reads standard input: every rank gets a copy.
	var stdin []byte
	for i, arg := range cmd {
		if (arg == "-prompt" || arg == "--prompt") && i+1 < len(cmd) && cmd[i+1] == "-" || arg == "-prompt=-" || arg == "--prompt=-" {
			if stdin, err = io.ReadAll(os.Stdin); err != nil {
				return err
			}
		}
	}
	procs := make([]*exec.Cmd, *n)
	type exit struct {
		rank int
		err  error
	}
	exits := make(chan exit, *n)
	for r := range procs {
		p := exec.Command(exe, cmd...)
		p.Env = append(withoutGroupEnv(os.Environ()), env...)
		p.Env = append(p.Env, "MLX_RANK="+strconv.Itoa(r), "MLX_HOSTFILE="+path)
		p.Stdout, p.Stderr = a.stdout, a.stderr
		if stdin != nil {
			p.Stdin = bytes.NewReader(stdin)
		}
		if err := p.Start(); err != nil {
			for _, q := range procs[:r] {
				q.Process.Kill()
			}
			return err
		}
		procs[r] = p
		go func(r int) { exits <- exit{r, p.Wait()} }(r)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	var first error
	for left := *n; left > 0; {
		select {
		case s := <-sigs:
			for _, p := range procs {
				p.Process.Signal(s)
			}
		case e := <-exits:
			left--
			if e.err != nil && first == nil {
				first = fmt.Errorf("launch: rank %d: %v", e.rank, e.err)
				// the group cannot go on without it
				for _, p := range procs {
					p.Process.Kill()
				}
			}
		}
	}
	return first
}

// withoutGroupEnv drops a group's variables, which launch sets itself.
func withoutGroupEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "MLX_RANK=") && !strings.HasPrefix(e, "MLX_HOSTFILE=") {
			out = append(out, e)
		}
	}
	return out
}

// loopbackRing is the ring backend's hostfile for n ranks on free ports
// of 127.0.0.1.
func loopbackRing(n int) ([]byte, error) {
	var hosts [][]string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("launch: finding a free port: %w", err)
		}
		ls = append(ls, l)
		hosts = append(hosts, []string{l.Addr().String()})
	}
	return json.Marshal(hosts)
}

// printHostCommands reads mlx.launch's hostfile and prints, per host, the
// command that runs its rank.
func (a *app) printHostCommands(path string, port int, cmd, env []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	type host struct {
		SSH string   `json:"ssh"`
		IPs []string `json:"ips"`
	}
	var hosts []host
	if err := json.Unmarshal(data, &hosts); err != nil {
		var wrapped struct {
			Hosts []host   `json:"hosts"`
			Envs  []string `json:"envs"`
		}
		if err2 := json.Unmarshal(data, &wrapped); err2 != nil || wrapped.Hosts == nil {
			return fmt.Errorf("%s: want mlx.launch's hostfile, a JSON list of {\"ssh\": name, \"ips\": [ip]} (or {\"hosts\": [...]}): %v", path, err)
		}
		hosts = wrapped.Hosts
		env = append(wrapped.Envs, env...)
	}
	if len(hosts) == 0 {
		return fmt.Errorf("%s: lists no hosts", path)
	}
	var ring [][]string
	for i, h := range hosts {
		if len(h.IPs) == 0 {
			return fmt.Errorf("%s: host %d (%q) has no ips; the ring backend connects to IP addresses", path, i, h.SSH)
		}
		ring = append(ring, []string{net.JoinHostPort(h.IPs[0], strconv.Itoa(port+i))})
	}
	rj, _ := json.Marshal(ring)
	const remote = "/tmp/archgen-ring.json"
	fmt.Fprintf(a.stdout, "# %d ranks; run each line on its host (as `ssh HOST '...'`), in the same directory\n", len(hosts))
	for r, h := range hosts {
		line := []string{"printf", shellQuote("%s\\n"), shellQuote(string(rj)), ">", remote, "&&", "env"}
		for _, e := range env {
			line = append(line, shellQuote(e))
		}
		line = append(line, "MLX_RANK="+strconv.Itoa(r), "MLX_HOSTFILE="+remote, "archrun")
		for _, c := range cmd {
			line = append(line, shellQuote(c))
		}
		fmt.Fprintf(a.stdout, "# rank %d on %s\n%s\n", r, h.SSH, strings.Join(line, " "))
	}
	return nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./=:,@%+", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// groupRank is this process's rank when it runs in a group (MLX_RANK
// set), else -1.
func groupRank() int {
	r, err := strconv.Atoi(os.Getenv("MLX_RANK"))
	if err != nil {
		return -1
	}
	return r
}

// inGroup reports whether the environment puts this process in a group.
func inGroup() bool {
	_, h := os.LookupEnv("MLX_HOSTFILE")
	_, r := os.LookupEnv("MLX_RANK")
	return h || r
}
