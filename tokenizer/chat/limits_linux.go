package chat

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// limitData bounds what the process may map from now on to n bytes more:
// its address space (RLIMIT_AS) at what it maps now plus n, and its data
// segment (RLIMIT_DATA) at n. The data limit alone does not hold: the Go
// runtime maps its heap over address space it reserved earlier, which
// the kernel does not count again.
func limitData(n int64) error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	var vm int64 = -1
	for _, line := range bytes.Split(status, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmSize:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
			if err != nil {
				return fmt.Errorf("/proc/self/status: VmSize %q: %v", rest, err)
			}
			vm = kb << 10
		}
	}
	if vm < 0 {
		return fmt.Errorf("/proc/self/status: no VmSize")
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: uint64(vm + n), Max: uint64(vm + n)}); err != nil {
		return fmt.Errorf("RLIMIT_AS: %v", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: uint64(n), Max: uint64(n)}); err != nil {
		return fmt.Errorf("RLIMIT_DATA: %v", err)
	}
	return nil
}

// setRendererAttrs makes a renderer die with the process that started it.
func setRendererAttrs(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// nearMemoryBound says whether an ended renderer's resident peak came
// within a quarter of its memory bound.
func nearMemoryBound(ps *os.ProcessState, b Bounds) bool {
	if ps == nil {
		return false
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	return ok && ru.Maxrss*1024 >= b.Memory*3/4
}
