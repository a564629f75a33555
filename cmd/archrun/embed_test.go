package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/internal/npy"
)

// TestEmbedCommand: archrun embed prints, for its arguments or the lines
// of standard input, the vectors archgen.Model.Embed gives (with the
// flags' pooling, dimensions and normalization), one JSON array a line,
// or writes them to an .npy file; bad flags and inputs are refused.
func TestEmbedCommand(t *testing.T) {
	texts := []string{"hello", "a sentence that is several tokens longer", "x"}
	m, err := archgen.Load(context.Background(), smolLM2, archgen.LoadOptions{})
	require.NoError(t, err)
	defer m.Free()
	want, err := m.Embed(context.Background(), texts, archgen.EmbedOptions{Pooling: archgen.PoolMean, Dimensions: 32, NoNormalize: true})
	require.NoError(t, err)

	var stdout bytes.Buffer
	require.NoError(t, run(append([]string{"embed", "-model", smolLM2, "-pooling", "mean", "-dimensions", "32", "-no-normalize"}, texts...), &stdout, nil))
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, len(texts))
	for i, line := range lines {
		var got []float32
		require.NoError(t, json.Unmarshal([]byte(line), &got))
		assert.Equal(t, want[i], got, "input %d", i)
	}

	// standard input's lines (the empty one skipped), written as .npy
	out := filepath.Join(t.TempDir(), "e.npy")
	stdin := strings.NewReader(strings.Join([]string{texts[0], "", texts[1], texts[2]}, "\n") + "\n")
	require.NoError(t, runIO([]string{"embed", "-model", smolLM2, "-pooling", "mean", "-dimensions", "32", "-no-normalize", "-out", out}, stdin, nil, nil))
	arr, err := npy.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, []int{len(texts), 32}, arr.Shape)
	data, ok := arr.Data.([]float32)
	require.True(t, ok, "float32 data, not %T", arr.Data)
	for i := range texts {
		assert.Equal(t, want[i], data[i*32:(i+1)*32], "input %d", i)
	}

	checkCLIErrors(t, []cliError{
		{[]string{"embed", "x"}, "", true, "-model is required"},
		{[]string{"embed", "-model", smolLM2, "-pooling", "max", "x"}, "", true, `-pooling "max": want last, mean or cls`},
		{[]string{"embed", "-model", smolLM2, "-dimensions", "-1", "x"}, "", true, "-dimensions -1: want 0 (all) or more"},
		{[]string{"embed", "-model", smolLM2}, "\n\n", true, "embed needs inputs"},
		{[]string{"embed", "-model", smolLM2, "-dimensions", "577", "x"}, "", false, "embed: dimensions 577: want 1 to the vectors' size, 576 (0: all)"},
		{[]string{"embed", "-model", smolLM2, "x", strings.Repeat("word ", 9000)}, "", true, "embed: input 2: "},
		{[]string{"embed", "-model", smolLM2, "x", strings.Repeat("word ", 9000)}, "", true, "tokens, more than the model's context of 8192"},
	})
}
