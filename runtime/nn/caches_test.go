package nn

import (
	"testing"

	"github.com/archgen/archgen/runtime/kv"
)

// TestNewCaches: each layer's spec gets its kind of cache: full and window
// attention caches, slots for a recurrent layer (the KV options do not
// apply), a list for a layer that keeps several.
func TestNewCaches(t *testing.T) {
	specs := []CacheSpec{{}, {Window: 16}, {States: 2}, {Parts: []CacheSpec{{States: 2}, {}}}}
	caches, err := NewCaches(specs, kv.Options{KVBits: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	if _, ok := caches[0].(*kv.Plain); !ok {
		t.Errorf("layer 0: %T, want a plain cache", caches[0])
	}
	if _, ok := caches[1].(*kv.Rotating); !ok {
		t.Errorf("layer 1: %T, want a window cache", caches[1])
	}
	if s, ok := caches[2].(*kv.States); !ok || s.Slots() != 2 {
		t.Errorf("layer 2: %T, want 2 slots", caches[2])
	}
	l, ok := caches[3].(*kv.List)
	if !ok || l.Parts() != 2 {
		t.Fatalf("layer 3: %T, want a list of 2", caches[3])
	}
	if _, ok := l.Part(0).(*kv.States); !ok {
		t.Errorf("layer 3 part 0: %T", l.Part(0))
	}
	if _, ok := l.Part(1).(*kv.Plain); !ok {
		t.Errorf("layer 3 part 1: %T", l.Part(1))
	}
}
