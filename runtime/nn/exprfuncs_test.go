package nn

import (
	"math"
	"testing"
)

func TestRoundBfloat16(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{8, 8},
		{math.Sqrt(48), 6.9375},    // 6.928..., between 6.90625 and 6.9375
		{math.Sqrt(2304), 48},      // exact
		{1 + 1.0/256, 1},           // a tie: to even
		{1 + 3.0/256, 1 + 4.0/256}, // a tie: to even, upwards
		{math.Inf(1), math.Inf(1)},
	} {
		if got := RoundBfloat16(c.in); got != c.want {
			t.Errorf("RoundBfloat16(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestCharAt(t *testing.T) {
	if CharAt("LLG", 2) != "G" || CharAt("LLG", 3) != "" || CharAt("", 0) != "" || CharAt("LG", -1) != "" {
		t.Fatal("CharAt")
	}
}

func TestRoundAndIf(t *testing.T) {
	if Round(2.5) != 2 || Round(3.5) != 4 || Round(-0.6) != -1 || Round(1.2) != 1 {
		t.Fatal("Round does not round as Python's round")
	}
	if If(true, "a", "b") != "a" || If(false, 1, 2) != 2 {
		t.Fatal("If")
	}
}
