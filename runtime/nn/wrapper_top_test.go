package nn

import (
	"encoding/json"
	"testing"
)

// TestUnwrapTopDefaults: a top-level default fills the top level before
// top_wins copies it, so it replaces the section's value when the top level
// lacks the key, and the top level's own value wins when it has one.
func TestUnwrapTopDefaults(t *testing.T) {
	w := &Wrapper{Section: "text_config", TopWins: []string{"vocab_size"}, TopDefaults: map[string]any{"vocab_size": 262208}, Runs: "x"}
	for _, c := range []struct {
		config string
		want   float64
	}{
		{`{"text_config": {"vocab_size": 100}}`, 262208},
		{`{"vocab_size": 50, "text_config": {"vocab_size": 100}}`, 50},
		{`{"vocab_size": null, "text_config": {}}`, 262208},
	} {
		_, text, err := w.Unwrap([]byte(c.config))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(text, &got); err != nil {
			t.Fatal(err)
		}
		if got["vocab_size"] != c.want {
			t.Errorf("%s: vocab_size %v, want %v", c.config, got["vocab_size"], c.want)
		}
	}
}
