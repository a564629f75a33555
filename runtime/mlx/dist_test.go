package mlx_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/archgen/archgen/internal/disttest"
	"github.com/archgen/archgen/runtime/mlx"
)

// collectives is what each rank of TestCollectives saw.
type collectives struct {
	Rank, Size int
	Sum        []float32
	Gather     []float32
	Max        []float32
	Received   []float32
	Err        string
}

// TestDistWorker is the body of one rank of the tests below; it does
// nothing when run as a test itself.
func TestDistWorker(t *testing.T) {
	name, ok := disttest.Worker()
	if !ok {
		return
	}
	grp, err := mlx.InitGroup(mlx.GroupOptions{Backend: "ring"})
	if err != nil {
		disttest.Report(collectives{Err: err.Error()})
		return
	}
	r := grp.Rank()
	g := mlx.NewGraph(nil)
	defer g.Close()
	read := func(a *mlx.Array) []float32 {
		if err := g.Eval(a); err != nil {
			t.Fatal(err)
		}
		v, err := a.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	switch name {
	case "collectives":
		res := collectives{Rank: r, Size: grp.Size()}
		// rank r holds [r+1, 10(r+1), -(r+1)]
		x := mlx.FromSlice(g, []float32{float32(r + 1), float32(10 * (r + 1)), -float32(r + 1)}, 3)
		res.Sum = read(g.AllSum(x, grp))
		res.Gather = read(g.Reshape(g.AllGather(g.Reshape(x, 1, 3), grp), -1))
		res.Max = read(g.AllMax(x, grp))
		// a ring of messages: each rank sends its x to the next and
		// receives the previous one's. Even ranks send first.
		next, prev := (r+1)%grp.Size(), (r+grp.Size()-1)%grp.Size()
		if r%2 == 0 {
			read(g.Send(x, next, grp))
			res.Received = read(g.Recv(mlx.Float32, prev, grp, 3))
		} else {
			res.Received = read(g.Recv(mlx.Float32, prev, grp, 3))
			read(g.Send(x, next, grp))
		}
		disttest.Report(res)
	case "killed":
		read(g.AllSum(mlx.FromSlice(g, []float32{1}, 1), grp))
		if r == 1 {
			os.Exit(3) // as a crash would: the sockets close
		}
		time.Sleep(200 * time.Millisecond)
		y := g.AllSum(mlx.FromSlice(g, make([]float32, 1024), 1024), grp)
		err := g.Eval(y)
		disttest.Report(collectives{Rank: r, Err: fmt.Sprint(err)})
	case "stopped":
		read(g.AllSum(mlx.FromSlice(g, []float32{1}, 1), grp))
		if r == 1 {
			// Alive and silent. The stop goes to this thread, not the
			// process: a process-wide SIGSTOP may be taken by another,
			// idle thread while this one runs on into the next all_sum
			// before the group stop reaches it.
			runtime.LockOSThread()
			syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
		}
		read(g.AllSum(mlx.FromSlice(g, make([]float32, 1024), 1024), grp))
		disttest.Report(collectives{Rank: r, Err: "the all_sum returned"})
	}
}

func TestCollectives(t *testing.T) {
	if !mlx.DistributedAvailable("ring") {
		t.Fatal("libmlx has no ring backend")
	}
	res := disttest.Run(t, 2, "TestDistWorker", "collectives", disttest.Options{})
	for _, r := range res {
		var c collectives
		r.Decode(t, &c)
		if c.Err != "" || r.ExitCode != 0 {
			t.Fatalf("rank %d: exit %d, %s\n%s", r.Rank, r.ExitCode, c.Err, r.Stderr)
		}
		if c.Rank != r.Rank || c.Size != 2 {
			t.Errorf("rank %d: reports rank %d of %d", r.Rank, c.Rank, c.Size)
		}
		// rank 0 holds [1, 10, -1], rank 1 [2, 20, -2]
		check := func(what string, got, want []float32) {
			if !slices.Equal(got, want) {
				t.Errorf("rank %d: %s = %v, want %v", r.Rank, what, got, want)
			}
		}
		check("all_sum", c.Sum, []float32{3, 30, -3})
		check("all_gather", c.Gather, []float32{1, 10, -1, 2, 20, -2})
		check("all_max", c.Max, []float32{2, 20, -1})
		other := float32(2 - r.Rank) // the other rank's r+1
		check("recv", c.Received, []float32{other, 10 * other, -other})
	}
}

func TestKilledPeer(t *testing.T) {
	zero := 0
	res := disttest.Run(t, 2, "TestDistWorker", "killed", disttest.Options{WaitFor: &zero, Timeout: 30 * time.Second})
	var c collectives
	res[0].Decode(t, &c)
	if !strings.Contains(c.Err, "connection to a peer was lost") {
		t.Errorf("rank 0's evaluation after rank 1 died: %q, want the ring's lost-peer error", c.Err)
	}
	if c.Err == "<nil>" {
		t.Errorf("rank 0's all_sum succeeded without its peer")
	}
	t.Logf("rank 0: %s (after %s)", c.Err, res[0].Elapsed)
}

func TestStoppedPeerTimesOut(t *testing.T) {
	zero := 0
	res := disttest.Run(t, 2, "TestDistWorker", "stopped", disttest.Options{
		WaitFor: &zero, Timeout: 40 * time.Second, Env: []string{"ARCHGEN_DIST_TIMEOUT=5s"}})
	r := res[0]
	if r.ExitCode != 1 {
		t.Fatalf("rank 0 exited with %d, want 1\nstdout:\n%s\nstderr:\n%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	want := "rank 0 of 2 (ring): an evaluation on stream"
	if !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "waited 5s for the group's peers") {
		t.Errorf("rank 0's stderr:\n%s\nwant the timeout's message (%q)", r.Stderr, want)
	}
	if r.Value != nil {
		t.Errorf("rank 0 reported %s: its all_sum returned without its peer", r.Value)
	}
}

func TestPeerNeverArrives(t *testing.T) {
	// rank 0 of a hostfile of 2, alone.
	res := disttest.Run(t, 2, "TestDistWorker", "collectives", disttest.Options{
		Ranks: []int{0}, Timeout: 40 * time.Second, Env: []string{"ARCHGEN_DIST_TIMEOUT=2s"}})
	var c collectives
	res[0].Decode(t, &c)
	if !strings.Contains(c.Err, "waited 2s for the group's peers") {
		t.Errorf("rank 0 alone: %q, want the init timeout's message", c.Err)
	}
}

func TestGroupEnvErrors(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/hosts.json"
	os.WriteFile(good, []byte(`[["127.0.0.1:1"],["127.0.0.1:2"]]`), 0o644)
	bad := dir + "/bad.json"
	os.WriteFile(bad, []byte(`{"hosts": []}`), 0o644)
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"MLX_HOSTFILE": dir + "/none.json", "MLX_RANK": "0"}, "MLX_HOSTFILE: open"},
		{map[string]string{"MLX_HOSTFILE": bad, "MLX_RANK": "0"}, "want a JSON list, per rank"},
		{map[string]string{"MLX_HOSTFILE": good}, "MLX_RANK is not"},
		{map[string]string{"MLX_HOSTFILE": good, "MLX_RANK": "2"}, `MLX_RANK="2": want a rank from 0 to 1`},
		{map[string]string{"MLX_HOSTFILE": good, "MLX_RANK": "0", "ARCHGEN_DIST_TIMEOUT": "soon"}, `ARCHGEN_DIST_TIMEOUT="soon"`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := mlx.InitGroup(mlx.GroupOptions{Backend: "ring"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("InitGroup: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSingletonGroup(t *testing.T) {
	grp, err := mlx.InitGroup(mlx.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if grp.Rank() != 0 || grp.Size() != 1 {
		t.Fatalf("a lone process: %s, want rank 0 of 1", grp)
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	y := g.AllSum(mlx.FromSlice(g, []float32{1, 2}, 2), grp)
	if err := g.Eval(y); err != nil {
		t.Fatal(err)
	}
	v, _ := y.Float32s()
	if !slices.Equal(v, []float32{1, 2}) {
		t.Errorf("all_sum over one process: %v, want [1 2]", v)
	}
	g.Send(y, 0, grp)
	if err := g.Err(); err == nil || !strings.Contains(err.Error(), "cannot send to rank 0") {
		t.Errorf("send to oneself: %v", err)
	}
}
