package kv

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/archgen/archgen/runtime/mlx"
)

// checksumKey is the reserved metadata key (under "0.", beside the user's)
// that holds the CRC-32C of a file's tensors: each one's name, dtype,
// shape and bytes, in name order. mlx-lm reads it as one more metadata
// entry.
const checksumKey = "kv_crc32c"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// tensorsChecksum is the CRC-32C of arrays, as checksumKey records it.
func tensorsChecksum(arrays map[string]*mlx.Array) (string, error) {
	names := make([]string, 0, len(arrays))
	for n := range arrays {
		names = append(names, n)
	}
	slices.Sort(names)
	h := crc32.New(castagnoli)
	var word [8]byte
	for _, n := range names {
		a := arrays[n]
		data, err := a.Bytes()
		if err != nil {
			return "", fmt.Errorf("tensor %s: %w", n, err)
		}
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(a.Dtype().String()))
		for _, d := range a.Shape() {
			binary.LittleEndian.PutUint64(word[:], uint64(d))
			h.Write(word[:])
		}
		h.Write(data)
	}
	return strconv.FormatUint(uint64(h.Sum32()), 16), nil
}

// writeAtomically has write make the file at a temporary path beside path
// (ending .safetensors, as MLX's writer wants), flushes it to the disk,
// and renames it to path: a reader sees the old file or the whole new one,
// never part of it, and a failed write leaves no file behind.
func writeAtomically(path string, write func(tmp string) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.safetensors")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	done := false
	defer func() {
		if !done {
			os.Remove(tmp)
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	f, err = os.Open(tmp)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself on the disk
		d.Close()
	}
	return nil
}
