// Command membw measures this machine's memory bandwidth, the bound on a
// decode step that has to read every weight once: copy (bytes read plus
// bytes written per second, as STREAM counts its Copy) and read-only
// (a sum over the buffer), each with 1 thread and with one per core, over
// buffers far larger than the caches. It prints one JSON object.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"
	"unsafe"
)

type figure struct {
	Threads int     `json:"threads"`
	CopyGBs float64 `json:"copy_gb_s"`
	ReadGBs float64 `json:"read_gb_s"`
}

func main() {
	mib := flag.Int("mib", 256, "buffer size per side, MiB")
	reps := flag.Int("reps", 7, "repetitions (the median is kept)")
	flag.Parse()
	n := *mib << 20
	src := make([]byte, n)
	dst := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // touch every page
	var out []figure
	for _, threads := range []int{1, runtime.NumCPU()} {
		f := figure{Threads: threads}
		f.CopyGBs = median(*reps, func() float64 {
			t := parallel(threads, n, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
			return 2 * float64(n) / t / 1e9
		})
		f.ReadGBs = median(*reps, func() float64 {
			t := parallel(threads, n, func(lo, hi int) { sink(sum(src[lo:hi])) })
			return float64(n) / t / 1e9
		})
		out = append(out, f)
		if runtime.NumCPU() == 1 {
			break
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"buffer_mib": *mib, "figures": out}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// parallel runs f over [0, n) split into threads parts and returns the
// seconds it took.
func parallel(threads, n int, f func(lo, hi int)) float64 {
	var wg sync.WaitGroup
	start := time.Now()
	part := (n + threads - 1) / threads
	for lo := 0; lo < n; lo += part {
		hi := min(lo+part, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
	return time.Since(start).Seconds()
}

// sum reads b as 64-bit words, eight independent sums at a time.
func sum(b []byte) uint64 {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	var s [8]uint64
	for i := 0; i+8 <= len(w); i += 8 {
		v := w[i : i+8 : i+8]
		s[0] += v[0]
		s[1] += v[1]
		s[2] += v[2]
		s[3] += v[3]
		s[4] += v[4]
		s[5] += v[5]
		s[6] += v[6]
		s[7] += v[7]
	}
	return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7]
}

var sinkMu sync.Mutex
var sinkV uint64

func sink(v uint64) { sinkMu.Lock(); sinkV += v; sinkMu.Unlock() }

func median(reps int, f func() float64) float64 {
	xs := make([]float64, reps)
	for i := range xs {
		xs[i] = f()
	}
	sort.Float64s(xs)
	return xs[reps/2]
}
