//go:build !linux

package chat

import (
	"os"
	"os/exec"
)

// limitData has no hard form here (RLIMIT_AS would count the shared
// libraries' mappings); the renderer keeps only the Go runtime's soft
// memory limit.
func limitData(int64) error { return nil }

// setRendererAttrs has nothing to set here: a renderer ends when its input
// closes with the process that started it.
func setRendererAttrs(*exec.Cmd) {}

// nearMemoryBound cannot tell here.
func nearMemoryBound(*os.ProcessState, Bounds) bool { return false }
