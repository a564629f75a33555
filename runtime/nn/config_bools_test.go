package nn

import "testing"

// TestConfigBools: a list of true and false reads as one, and anything
// else is refused naming the key.
func TestConfigBools(t *testing.T) {
	r, err := NewConfigReader([]byte(`{"model_type": "x", "good": [true, false], "bad": [1, 0]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := Required[[]bool](r, "good"); len(got) != 2 || !got[0] || got[1] {
		t.Fatalf("good reads as %v", got)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	Required[[]bool](r, "bad")
	want := "bad: want a list of true and false, got [1, 0]"
	if err := r.Err(); err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
