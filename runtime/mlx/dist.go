package mlx

/*
#include <stdlib.h>
#include "dist.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// DistributedAvailable reports whether the installed libmlx has the
// distributed backend named: "ring" (TCP), "mpi", "nccl", "jaccl", or "any".
func DistributedAvailable(backend string) bool {
	cb := C.CString(backend)
	defer C.free(unsafe.Pointer(cb))
	return C.mlxg_dist_is_available(cb) != 0
}

// GroupOptions choose how InitGroup finds its peers.
type GroupOptions struct {
	// Backend is MLX's backend name; "" is "any", the first one that
	// finds a group.
	Backend string
	// Strict makes a process that finds no group an error. Without it a
	// lone process gets a group of size 1. A process whose environment
	// names a group (MLX_HOSTFILE or MLX_RANK set) is always strict.
	Strict bool
	// Timeout bounds the wait for the peers, both when the group forms
	// and in every evaluation on a stream that runs its collectives; 0 is
	// the environment's ARCHGEN_DIST_TIMEOUT (a Go duration), else
	// DefaultGroupTimeout.
	Timeout time.Duration
	// OnTimeout is told when an evaluation has waited Timeout for its
	// peers. Such an evaluation cannot be cancelled (the stream stays
	// taken), so the process must end; nil prints err on standard error
	// and exits with status 1.
	OnTimeout func(err error)
}

// DefaultGroupTimeout is how long a process waits for its peers when
// neither GroupOptions nor the environment say.
const DefaultGroupTimeout = 2 * time.Minute

// Group is a group of processes running one computation together, as MLX's
// distributed layer forms it: each process has a rank in [0, Size). A
// process started by mlx.launch, or by hand with MLX_RANK and MLX_HOSTFILE
// (a JSON list, per rank, of "ip:port" strings) set, finds the others so;
// MLX_RING_VERBOSE=1 makes the ring backend tell what it does.
//
// The collectives are Graph ops (AllSum, AllGather, AllMax, Send, Recv);
// every process must build and evaluate the same ones in the same order.
// A peer that exits makes the others' evaluations fail with MLX's error; a
// peer that stops answering (hung, or its machine cut off) makes them wait,
// which the group bounds with its timeout (see GroupOptions.OnTimeout).
// A process in a group of more than one ignores SIGPIPE, so that a write
// to a dead peer's socket fails as an error instead of ending it (a write
// to a closed standard output then fails as an error too).
type Group struct {
	c          C.mlxg_group
	rank, size int
	backend    string
	timeout    time.Duration
	onTimeout  func(error)
	sumBytes   atomic.Int64
	sumCalls   atomic.Int64
}

// Rank is this process's index in the group.
func (g *Group) Rank() int { return g.rank }

// Size is the number of processes in the group.
func (g *Group) Size() int { return g.size }

// Timeout is how long an evaluation waits for the peers.
func (g *Group) Timeout() time.Duration { return g.timeout }

func (g *Group) String() string {
	return fmt.Sprintf("rank %d of %d (%s)", g.rank, g.size, g.backend)
}

// AllSumStats are the number of AllSum ops built on the group so far and
// the bytes of their inputs: what each process contributes to them.
func (g *Group) AllSumStats() (calls, bytes int64) {
	return g.sumCalls.Load(), g.sumBytes.Load()
}

var groupMu sync.Mutex

// InitGroup forms the group of this process (MLX keeps one per backend;
// a second call returns the same members). Errors name the environment
// variable or file at fault; a group whose peers do not all arrive within
// the timeout is an error too.
func InitGroup(opts GroupOptions) (*Group, error) {
	groupMu.Lock()
	defer groupMu.Unlock()
	backend := opts.Backend
	if backend == "" {
		backend = "any"
	}
	timeout, err := groupTimeout(opts.Timeout)
	if err != nil {
		return nil, err
	}
	strict := opts.Strict
	hostfile, hasHost := os.LookupEnv("MLX_HOSTFILE")
	rankEnv, hasRank := os.LookupEnv("MLX_RANK")
	if hasHost || hasRank {
		strict = true
	}
	if !DistributedAvailable(backend) {
		if !strict {
			return nil, &Error{Op: "distributed", Msg: fmt.Sprintf("backend %q is not available in this libmlx", backend)}
		}
		return nil, &Error{Op: "distributed", Msg: fmt.Sprintf("MLX_RANK/MLX_HOSTFILE ask for a group, but backend %q is not available in this libmlx", backend)}
	}
	if hasHost && (backend == "ring" || backend == "any") {
		if err := checkHostfile(hostfile, rankEnv, hasRank); err != nil {
			return nil, err
		}
	}
	type result struct {
		c   C.mlxg_group
		err error
	}
	done := make(chan result, 1)
	cb := C.CString(backend)
	go func() {
		defer C.free(unsafe.Pointer(cb))
		var r result
		var msg *C.char
		if C.mlxg_dist_init(&r.c, C.bool(strict), cb, &msg) != 0 {
			r.err = takeErr("distributed init", msg)
		}
		done <- r
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(timeout):
		return nil, &Error{Op: "distributed init", Msg: fmt.Sprintf(
			"rank %s waited %s for the group's peers (MLX_HOSTFILE %q): one is not running or not reachable", rankEnv, timeout, hostfile)}
	}
	if r.err != nil {
		return nil, r.err
	}
	g := &Group{c: r.c, backend: backend, timeout: timeout, onTimeout: opts.OnTimeout}
	g.rank = int(C.mlxg_group_rank(r.c))
	g.size = int(C.mlxg_group_size(r.c))
	if g.size > 1 {
		// The ring backend writes to sockets that a dead peer has closed;
		// the write must fail (and the evaluation with it), not kill the
		// process with SIGPIPE.
		signal.Ignore(syscall.SIGPIPE)
	}
	return g, nil
}

// groupTimeout is the timeout opts ask for, or the environment's.
func groupTimeout(d time.Duration) (time.Duration, error) {
	if d > 0 {
		return d, nil
	}
	if v, ok := os.LookupEnv("ARCHGEN_DIST_TIMEOUT"); ok && v != "" {
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 {
			return 0, &Error{Op: "distributed", Msg: fmt.Sprintf("ARCHGEN_DIST_TIMEOUT=%q: want a positive duration such as 30s or 5m", v)}
		}
		return t, nil
	}
	return DefaultGroupTimeout, nil
}

// checkHostfile checks the ring backend's environment before MLX reads it,
// so that a mistake is named instead of waited on.
func checkHostfile(path, rankEnv string, hasRank bool) error {
	bad := func(format string, args ...any) error {
		return &Error{Op: "distributed", Msg: fmt.Sprintf(format, args...)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return bad("MLX_HOSTFILE: %v", err)
	}
	var hosts [][]string
	if err := json.Unmarshal(data, &hosts); err != nil {
		return bad("MLX_HOSTFILE %s: want a JSON list, per rank, of lists of \"ip:port\" strings: %v", path, err)
	}
	if len(hosts) == 0 {
		return bad("MLX_HOSTFILE %s: lists no ranks", path)
	}
	for i, h := range hosts {
		if len(h) == 0 {
			return bad("MLX_HOSTFILE %s: rank %d has no address", path, i)
		}
	}
	if !hasRank {
		return bad("MLX_HOSTFILE is set but MLX_RANK is not: each process needs its rank (0 to %d)", len(hosts)-1)
	}
	rank, err := strconv.Atoi(rankEnv)
	if err != nil || rank < 0 || rank >= len(hosts) {
		return bad("MLX_RANK=%q: want a rank from 0 to %d, as MLX_HOSTFILE %s lists %d", rankEnv, len(hosts)-1, path, len(hosts))
	}
	return nil
}

// The streams whose evaluations run collectives, and their groups: every
// evaluation on such a stream is timed (see watch).
var (
	watched    sync.Map // *Stream -> *Group
	anyWatched atomic.Bool
)

// watch starts the timer of an evaluation on s, when s runs collectives;
// the returned func stops it (nil when there is none).
func watch(s *Stream) func() {
	if !anyWatched.Load() {
		return nil
	}
	v, ok := watched.Load(s)
	if !ok {
		return nil
	}
	g := v.(*Group)
	t := time.AfterFunc(g.timeout, func() { g.expired(s) })
	return func() { t.Stop() }
}

func (g *Group) expired(s *Stream) {
	err := &Error{Op: "distributed", Msg: fmt.Sprintf(
		"%s: an evaluation on %s has waited %s for the group's peers: one has stopped, hung or lost the network",
		g, s, g.timeout)}
	if g.onTimeout != nil {
		g.onTimeout(err)
		return
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// collective checks a collective's group and arms the timing of g's stream.
func (gr *Graph) collective(op string, g *Group, args ...*Array) bool {
	if !gr.ok(op, args...) {
		return false
	}
	if g == nil || g.c.ctx == nil {
		gr.err = &Error{Op: op, Msg: "no group (make one with InitGroup)"}
		return false
	}
	if g.size > 1 {
		if _, ok := watched.Load(gr.s); !ok {
			watched.Store(gr.s, g)
			anyWatched.Store(true)
		}
	}
	return true
}

// AllSum is the elementwise sum of x over the group's processes; each gets
// the whole sum.
func (gr *Graph) AllSum(x *Array, g *Group) *Array {
	if !gr.collective("all_sum", g, x) {
		return gr.bad
	}
	g.sumCalls.Add(1)
	g.sumBytes.Add(int64(x.Nbytes()))
	return gr.done("all_sum", C.mlxg_all_sum(gr.res0(), x.c, g.c, gr.s.c, gr.errp()))
}

// AllGather concatenates every process's x along the first axis, in rank
// order.
func (gr *Graph) AllGather(x *Array, g *Group) *Array {
	if !gr.collective("all_gather", g, x) {
		return gr.bad
	}
	return gr.done("all_gather", C.mlxg_all_gather(gr.res0(), x.c, g.c, gr.s.c, gr.errp()))
}

// AllMax is the elementwise maximum of x over the group's processes.
func (gr *Graph) AllMax(x *Array, g *Group) *Array {
	if !gr.collective("all_max", g, x) {
		return gr.bad
	}
	return gr.done("all_max", C.mlxg_all_max(gr.res0(), x.c, g.c, gr.s.c, gr.errp()))
}

// Send sends x to rank dst; the send happens when the returned array is
// evaluated.
func (gr *Graph) Send(x *Array, dst int, g *Group) *Array {
	if !gr.collective("send", g, x) {
		return gr.bad
	}
	if dst < 0 || dst >= g.size || dst == g.rank {
		gr.err = &Error{Op: "send", Msg: fmt.Sprintf("rank %d cannot send to rank %d of a group of %d", g.rank, dst, g.size)}
		return gr.bad
	}
	return gr.done("send", C.mlxg_send(gr.res0(), x.c, C.int(dst), g.c, gr.s.c, gr.errp()))
}

// Recv receives an array of the given dtype and shape from rank src.
func (gr *Graph) Recv(dtype Dtype, src int, g *Group, shape ...int) *Array {
	if !gr.collective("recv", g) {
		return gr.bad
	}
	if src < 0 || src >= g.size || src == g.rank {
		gr.err = &Error{Op: "recv", Msg: fmt.Sprintf("rank %d cannot receive from rank %d of a group of %d", g.rank, src, g.size)}
		return gr.bad
	}
	if !dtype.Valid() {
		gr.err = &Error{Op: "recv", Msg: fmt.Sprintf("unknown dtype %s", dtype)}
		return gr.bad
	}
	sh, err := shape32(shape)
	if err != nil {
		gr.err = err
		return gr.bad
	}
	return gr.done("recv", C.mlxg_recv(gr.res0(), ptr32(sh), C.int(len(sh)), C.int(dtype), C.int(src), g.c, gr.s.c, gr.errp()))
}
