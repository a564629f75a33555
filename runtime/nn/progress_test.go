package nn_test

import (
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/nn"
)

// TestProgress: loading reports the bytes of weights read, growing to the
// whole, which is the size of the weights the model holds.
func TestProgress(t *testing.T) {
	var calls [][2]int64
	m, err := registry.Load("../../testdata/parity/llama/base/model", nn.Options{
		Progress: func(done, total int64) { calls = append(calls, [2]int64{done, total}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if len(calls) < 2 {
		t.Fatalf("progress called %d times", len(calls))
	}
	total := calls[0][1]
	if calls[0][0] != 0 || total != int64(m.Info().Nbytes) {
		t.Fatalf("first call %v; the weights hold %d bytes", calls[0], m.Info().Nbytes)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i][1] != total || calls[i][0] < calls[i-1][0] {
			t.Fatalf("call %d %v after %v", i, calls[i], calls[i-1])
		}
	}
	if last := calls[len(calls)-1]; last[0] != total {
		t.Fatalf("last call %v, want done = total", last)
	}
}
