package generate

import (
	"strings"
	"testing"
)

func TestStopWatcher(t *testing.T) {
	cases := []struct {
		stops  []string
		pieces []string
		want   string // what is passed on, pieces joined by |
		hit    bool
	}{
		{nil, []string{"ab", "cd"}, "ab|cd", false},
		{[]string{"END"}, []string{"hello E", "N", "D more"}, "hello ||", true},
		{[]string{"END"}, []string{"hello E", "nd"}, "hello |End", false},
		{[]string{"\n\n", "###"}, []string{"a\n", "b#", "#", "#c"}, "a|\nb||", true},
		{[]string{"stop"}, []string{"nonstop"}, "non", true},
	}
	for _, c := range cases {
		w := stopWatcher{stops: c.stops}
		var got []string
		hit := false
		for _, p := range c.pieces {
			out, h := w.push(p)
			got = append(got, out)
			if h {
				hit = true
				break
			}
		}
		if !hit {
			got[len(got)-1] += w.rest()
		}
		if strings.Join(got, "|") != c.want || hit != c.hit {
			t.Errorf("stops %q, pieces %q: got %q hit=%v, want %q hit=%v", c.stops, c.pieces, strings.Join(got, "|"), hit, c.want, c.hit)
		}
	}
}
