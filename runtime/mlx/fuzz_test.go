package mlx

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseSafetensorsHeader: no input makes the header reader panic, and
// every header it accepts describes tensors whose bytes lie inside the file
// and match their shapes.
func FuzzParseSafetensorsHeader(f *testing.F) {
	header := func(json string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(json)))
		return append(append(b, json...), make([]byte, data)...)
	}
	f.Add(header(`{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}`, 24))
	f.Add(header(`{"__metadata__":{"format":"mlx"},"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"U32","shape":[1,2],"data_offsets":[8,16]}}`, 16))
	f.Add(header(`{"e":{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]},"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}`, 8))
	f.Add(header(`{"w":{"dtype":"F16","shape":[9223372036854775807,2],"data_offsets":[0,4]}}`, 4))
	f.Add([]byte("version https://git-lfs.github.com/spec/v1\n"))
	f.Add([]byte{})
	// A file SaveSafetensors wrote.
	g := NewGraph(nil)
	x := g.Reshape(g.Arange(0, 6, 1, Float32), 2, 3)
	p := filepath.Join(f.TempDir(), "w.safetensors")
	if err := g.Eval(x); err != nil {
		f.Fatal(err)
	}
	if err := SaveSafetensors(p, map[string]*Array{"x": x, "y": g.AsType(x, Float16)}, map[string]string{"format": "mlx"}); err != nil {
		f.Fatal(err)
	}
	g.Close()
	if b, err := os.ReadFile(p); err != nil {
		f.Fatal(err)
	} else {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseSafetensorsHeader(bytes.NewReader(data), int64(len(data)), "fuzz.safetensors")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.safetensors: not a valid safetensors file: ") {
				t.Fatalf("error without the file's name: %v", err)
			}
			return
		}
		for _, ti := range h.Tensors {
			n := int64(ti.Dtype.Size())
			for _, d := range ti.Shape {
				n *= int64(d)
			}
			if ti.Begin < 0 || ti.End > h.DataSize || ti.End-ti.Begin != n {
				t.Fatalf("accepted tensor %q: bytes [%d, %d) of %d for %v %s", ti.Name, ti.Begin, ti.End, h.DataSize, ti.Shape, ti.Dtype)
			}
		}
	})
}
