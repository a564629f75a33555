package mlx

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Graph builds and evaluates MLX computations on one stream. It owns every
// array its ops make and records the first error; see the package doc.
type Graph struct {
	s      *Stream
	err    error
	closed bool
	gen    uint32 // bumped by Reset: arrays of an older generation are invalid
	st     *graphState
	slab   []Array // arrays are allocated from here in chunks
	ibuf   [64]int32
	bad    *Array // what failed ops return: invalid, and reads give err
	// carried are the values a forward pass hands from one layer to later
	// ones (Carry), by key; Reset and Close drop them.
	carried map[any]*Array
}

// graphState is what Close (or the cleanup of a graph nobody closed) frees.
type graphState struct {
	slot    *C.mlxg_slot // C memory: results and error of the call under way
	handles []C.mlxg_array
	live    int // handles not yet kept
}

func (st *graphState) free() {
	if st.slot == nil {
		return
	}
	hs := st.handles[:0:0]
	for _, h := range st.handles {
		if h.ctx != nil {
			hs = append(hs, h)
		}
	}
	if len(hs) > 0 {
		C.mlxg_array_free_many(&hs[0], C.int(len(hs)))
	}
	C.free(unsafe.Pointer(st.slot))
	st.slot = nil
	st.handles = nil
	st.live = 0
}

// NewGraph starts a graph on stream s (DefaultStream when nil).
func NewGraph(s *Stream) *Graph {
	if s == nil {
		s = DefaultStream()
	}
	st := &graphState{slot: (*C.mlxg_slot)(C.calloc(1, C.size_t(unsafe.Sizeof(C.mlxg_slot{}))))}
	g := &Graph{s: s, st: st}
	g.bad = &Array{g: g}
	// A graph dropped without Close still frees its arrays, eventually. Close
	// is the deterministic path and the one to use.
	runtime.AddCleanup(g, func(st *graphState) { st.free() }, st)
	return g
}

// Stream is the stream g's ops run on.
func (g *Graph) Stream() *Stream { return g.s }

// Err is the first error any op of g met, or nil.
func (g *Graph) Err() error { return g.err }

// Live is the number of arrays g owns now (made and not kept).
func (g *Graph) Live() int { return g.st.live }

// Close frees every array g still owns. Arrays passed to Keep live on.
// Closing twice is a no-op.
func (g *Graph) Close() {
	if g.closed {
		return
	}
	g.closed = true
	g.st.free()
	g.slab = nil
	g.carried = nil
}

// Reset frees every array g owns and clears its error, so the graph can be
// used again: a loop that builds one step per iteration calls Reset instead
// of making a graph each time.
func (g *Graph) Reset() {
	if g.closed {
		return
	}
	st := g.st
	hs := st.handles[:0]
	for _, h := range st.handles {
		if h.ctx != nil {
			hs = append(hs, h)
		}
	}
	if len(hs) > 0 {
		C.mlxg_array_free_many(&hs[0], C.int(len(hs)))
	}
	// Arrays of the old generation now read as invalid.
	g.gen++
	st.handles = st.handles[:0]
	st.live = 0
	g.err = nil
	g.carried = nil
}

// Carry keeps a under key for the ops g builds after it: a value one layer
// of a forward pass hands to later layers (RWKV-7's first values), read
// back with Carried. The graph owns a as before; Reset and Close drop it.
func (g *Graph) Carry(key any, a *Array) {
	if g.carried == nil {
		g.carried = map[any]*Array{}
	}
	g.carried[key] = a
}

// Carried is the array kept under key by Carry, or nil when none is.
func (g *Graph) Carried(key any) *Array { return g.carried[key] }

// Keep hands arrays over to the caller: Close no longer frees them, and the
// caller releases each with Free. Arrays g does not own are left as they are.
func (g *Graph) Keep(arrays ...*Array) {
	for _, a := range arrays {
		if a == nil || a.g != g || !a.valid() {
			continue
		}
		g.st.handles[a.i].ctx = nil
		g.st.live--
		a.g = nil
	}
}

// Fail records err as the graph's error unless one is recorded already.
// Callers building on a graph use it for their own checks, so that their
// failures surface at Eval like an op's.
func (g *Graph) Fail(err error) {
	if g.err == nil && err != nil {
		g.err = err
	}
}

// Failf records a formatted error, as Fail does.
func (g *Graph) Failf(format string, args ...any) {
	g.Fail(fmt.Errorf(format, args...))
}

// ok checks that g can run an op on the given arrays, recording why not.
func (g *Graph) ok(op string, args ...*Array) bool {
	if g.err != nil {
		return false
	}
	if g.closed {
		g.err = &Error{Op: op, Msg: "graph is closed"}
		return false
	}
	for i, a := range args {
		if !a.valid() {
			if a != nil && a.g != nil && a.g != g && a.g.err != nil {
				g.err = a.g.err
			} else {
				g.err = &Error{Op: op, Msg: fmt.Sprintf("argument %d is invalid (freed, from a closed graph, or the result of a failed op)", i+1)}
			}
			return false
		}
	}
	return true
}

// okOpt is ok for ops whose nil arguments are optional ones left out.
func (g *Graph) okOpt(op string, args ...*Array) bool {
	if g.err != nil {
		return false
	}
	for i, a := range args {
		if a == nil {
			continue
		}
		if !a.valid() {
			return g.ok(op, args[i])
		}
	}
	return g.ok(op)
}

// res0 is where the shim writes a single result.
func (g *Graph) res0() *C.mlxg_array { return &g.st.slot.res[0] }

func (g *Graph) errp() **C.char { return &g.st.slot.err }

// done turns a call's status into the result array or a recorded error.
func (g *Graph) done(op string, rc C.int) *Array {
	if rc != 0 {
		g.failC(op)
		return g.bad
	}
	return g.adopt(g.st.slot.res[0])
}

func (g *Graph) failC(op string) {
	err := takeErr(op, g.st.slot.err)
	g.st.slot.err = nil
	if g.err == nil {
		g.err = err
	}
}

// adopt makes g the owner of a new handle.
func (g *Graph) adopt(c C.mlxg_array) *Array {
	if len(g.slab) == 0 {
		g.slab = make([]Array, 64)
	}
	a := &g.slab[0]
	g.slab = g.slab[1:]
	a.c, a.g, a.s, a.i, a.gen = c, g, g.s, int32(len(g.st.handles)), g.gen
	g.st.handles = append(g.st.handles, c)
	g.st.live++
	return a
}

// ints packs int arguments into the graph's buffer, at off, for one call.
func (g *Graph) ints(off int, xs []int) *C.int32_t {
	if len(xs) == 0 {
		return nil
	}
	var buf []int32
	if off+len(xs) <= len(g.ibuf) {
		buf = g.ibuf[off : off+len(xs)]
	} else {
		buf = make([]int32, len(xs))
	}
	for i, x := range xs {
		buf[i] = int32(x)
	}
	return (*C.int32_t)(unsafe.Pointer(&buf[0]))
}

// handles lists the C handles of arrays for one call.
func handles(arrays []*Array) []C.mlxg_array {
	hs := make([]C.mlxg_array, len(arrays))
	for i, a := range arrays {
		hs[i] = a.c
	}
	return hs
}

// Eval evaluates the given arrays and reports g's first error: one an op
// met while the graph was built, or one MLX met while evaluating.
func (g *Graph) Eval(arrays ...*Array) error { return g.eval("eval", false, arrays) }

// AsyncEval queues the evaluation of arrays and returns without waiting; a
// later Eval (or read) of them waits. Errors met while building are
// reported now; errors of the evaluation itself at that later Eval.
func (g *Graph) AsyncEval(arrays ...*Array) error { return g.eval("async_eval", true, arrays) }

func (g *Graph) eval(op string, async bool, arrays []*Array) error {
	if !g.ok(op, arrays...) {
		return g.err
	}
	if len(arrays) == 0 {
		return nil
	}
	hs := handles(arrays)
	unlock := g.s.lock()
	var rc C.int
	if async {
		rc = C.mlxg_async_eval(&hs[0], C.int(len(hs)), g.s.c, g.errp())
	} else {
		rc = C.mlxg_eval(&hs[0], C.int(len(hs)), g.s.c, g.errp())
	}
	unlock()
	if rc != 0 {
		g.failC(op)
	}
	return g.err
}
