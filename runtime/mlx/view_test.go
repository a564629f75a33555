package mlx

import (
	"encoding/binary"
	"slices"
	"testing"
)

// TestView reads uint8 bytes as uint32 words: four bytes to a word,
// little-endian as the CPU stores them, the last axis a quarter as long.
func TestView(t *testing.T) {
	g := NewGraph(nil)
	defer g.Close()
	b := make([]uint8, 2*8)
	for i := range b {
		b[i] = uint8(17*i + 3)
	}
	v := g.View(FromSlice(g, b, 2, 8), Uint32)
	if got := v.Shape(); !slices.Equal(got, []int{2, 2}) {
		t.Fatalf("shape %v, want [2 2]", got)
	}
	got, err := v.Uint32s()
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if want := binary.LittleEndian.Uint32(b[4*i:]); got[i] != want {
			t.Errorf("word %d: %#x, want %#x", i, got[i], want)
		}
	}
	// a last axis that does not divide into words is MLX's error, not a crash
	g.View(FromSlice(g, b[:6], 6), Uint32)
	if g.Err() == nil {
		t.Error("viewing 6 bytes as uint32 words succeeded")
	}
}
