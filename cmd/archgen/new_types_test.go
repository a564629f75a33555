package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTypeOfLists: a draft types a config's lists by their entries, a
// list of true and false as bools.
func TestTypeOfLists(t *testing.T) {
	for _, x := range []struct{ json, want string }{
		{`[1, 2]`, "ints"},
		{`[1, 2.5]`, "floats"},
		{`["a"]`, "strings"},
		{`[true, false]`, "bools"},
		{`[true, 1]`, ""},
	} {
		d := json.NewDecoder(strings.NewReader(x.json))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if got := typeOf(v); got != x.want {
			t.Errorf("%s: %q, want %q", x.json, got, x.want)
		}
	}
}
