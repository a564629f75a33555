package main

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/runtime/mlx"
)

// TestMemoryLimit: -memory-limit refuses weights larger than it, and
// stops greedy decoding once MLX holds more; a size it cannot read is a
// usage error.
func TestMemoryLimit(t *testing.T) {
	old := mlx.MemoryLimit()
	t.Cleanup(func() { mlx.SetMemoryLimit(old) })
	dir, _ := level(t, "llama", "base", "float32")
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var size int64
	for _, f := range files {
		h, err := mlx.ReadSafetensorsHeader(f)
		if err != nil {
			t.Fatal(err)
		}
		size += h.DataSize
	}
	greedy := func(limit string) error {
		return run([]string{"greedy", "-model", dir, "-tokens", "1,2,3", "-n", "4", "-memory-limit", limit}, &bytes.Buffer{}, nil)
	}
	err := greedy("1KB")
	if want := fmt.Sprintf("%s: the weights take %d bytes, more than the memory limit of 1000 bytes", dir, size); err == nil || err.Error() != want {
		t.Errorf("-memory-limit 1KB: %v, want %s", err, want)
	}
	if got := mlx.MemoryLimit(); got != 1000 {
		t.Errorf("MLX's memory limit is %d, want the 1000 bytes set", got)
	}
	err = greedy(strconv.FormatInt(size, 10))
	if !errors.Is(err, generate.ErrMemoryLimit) || !strings.Contains(err.Error(), fmt.Sprintf("more than the limit of %d bytes", size)) {
		t.Errorf("-memory-limit of the weights' size: %v, want the generation stopped", err)
	}
	if err := greedy("1GiB"); err != nil {
		t.Errorf("-memory-limit 1GiB: %v", err)
	}
	for _, bad := range []string{"lots", "-5", "0", "12XB", "1e30"} {
		var u usageError
		if err := greedy(bad); !errors.As(err, &u) || !strings.Contains(err.Error(), "want a positive size such as 8GB, 512MiB or a number of bytes") {
			t.Errorf("-memory-limit %q: %v, want a usage error", bad, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"123": 123, "8GB": 8e9, "512MiB": 512 << 20, "1.5 kb": 1500, "2TiB": 2 << 40, "7b": 7} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestEmptyPrompt: generate refuses an empty prompt before loading.
func TestEmptyPrompt(t *testing.T) {
	dir, _ := level(t, "llama", "base", "float32")
	var u usageError
	err := run([]string{"generate", "-model", dir, "-prompt", ""}, &bytes.Buffer{}, &bytes.Buffer{})
	if !errors.As(err, &u) || err.Error() != "-prompt is required (and may not be empty)" {
		t.Errorf("empty prompt: %v", err)
	}
}
