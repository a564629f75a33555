package mlx

import (
	"fmt"
	"os"
	"sort"
	"unsafe"
)

// SafetensorsFile is an open safetensors file whose tensors can be read in
// part: a process holding one shard of a model reads only its slices.
type SafetensorsFile struct {
	Path      string
	Header    *SafetensorsHeader
	f         *os.File
	dataStart int64
}

// OpenSafetensors opens path and checks its header (as
// ReadSafetensorsHeader does).
func OpenSafetensors(path string) (*SafetensorsFile, error) {
	h, err := ReadSafetensorsHeader(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &SafetensorsFile{Path: path, Header: h, f: f, dataStart: st.Size() - h.DataSize}, nil
}

// Close closes the file.
func (s *SafetensorsFile) Close() error { return s.f.Close() }

// Tensor is the header's entry of the tensor name.
func (s *SafetensorsFile) Tensor(name string) (TensorInfo, bool) {
	ts := s.Header.Tensors
	i := sort.Search(len(ts), func(i int) bool { return ts[i].Name >= name })
	if i < len(ts) && ts[i].Name == name {
		return ts[i], true
	}
	return TensorInfo{}, false
}

// ReadSlice reads the part [lo, hi) along axis of the tensor name into a
// new array (owned by the caller), reading those bytes only: one run per
// index of the axes before axis.
func (s *SafetensorsFile) ReadSlice(name string, axis, lo, hi int) (*Array, error) {
	t, ok := s.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", s.Path, name)
	}
	if axis < 0 {
		axis += len(t.Shape)
	}
	if axis < 0 || axis >= len(t.Shape) || lo < 0 || hi > t.Shape[axis] || lo > hi {
		return nil, fmt.Errorf("%s: tensor %q of shape %v has no slice [%d, %d) on axis %d", s.Path, name, t.Shape, lo, hi, axis)
	}
	outer, inner := 1, t.Dtype.Size()
	for _, d := range t.Shape[:axis] {
		outer *= d
	}
	for _, d := range t.Shape[axis+1:] {
		inner *= d
	}
	run := (hi - lo) * inner               // bytes per outer index
	stride := int64(t.Shape[axis] * inner) // bytes between them in the file
	buf := make([]byte, outer*run)
	base := s.dataStart + t.Begin + int64(lo*inner)
	if outer > 0 && run > 0 {
		if stride == int64(run) {
			if _, err := s.f.ReadAt(buf, base); err != nil {
				return nil, fmt.Errorf("%s: tensor %q: %w", s.Path, name, err)
			}
		} else {
			for o := 0; o < outer; o++ {
				if _, err := s.f.ReadAt(buf[o*run:(o+1)*run], base+int64(o)*stride); err != nil {
					return nil, fmt.Errorf("%s: tensor %q: %w", s.Path, name, err)
				}
			}
		}
	}
	shape := append([]int(nil), t.Shape...)
	shape[axis] = hi - lo
	n := 1
	for _, d := range shape {
		n *= d
	}
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	} else {
		var one [8]byte
		p = unsafe.Pointer(&one[0])
	}
	a, err := newArray(p, n, t.Dtype, shape)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", s.Path, name, err)
	}
	return a, nil
}
