package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// swappedTokens is a copy of the checkpoint dir whose tokenizer gives two
// ids each other's tokens: another tokenizer of the same size.
func swappedTokens(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "swapped")
	require.NoError(t, os.CopyFS(out, os.DirFS(dir)))
	b, err := os.ReadFile(filepath.Join(out, "tokenizer.json"))
	require.NoError(t, err)
	var tok map[string]any
	require.NoError(t, json.Unmarshal(b, &tok))
	vocab := tok["model"].(map[string]any)["vocab"].(map[string]any)
	var a, z string
	for k, v := range vocab {
		switch v.(float64) {
		case 100:
			a = k
		case 101:
			z = k
		}
	}
	require.NotEmpty(t, a)
	require.NotEmpty(t, z)
	vocab[a], vocab[z] = vocab[z], vocab[a]
	b, err = json.Marshal(tok)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(out, "tokenizer.json"), b, 0o644))
	return out
}

// extraToken is a copy of the checkpoint dir whose tokenizer holds one
// added token more: a tokenizer of another size, on the same embedding.
func extraToken(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "extra")
	require.NoError(t, os.CopyFS(out, os.DirFS(dir)))
	b, err := os.ReadFile(filepath.Join(out, "tokenizer.json"))
	require.NoError(t, err)
	var tok map[string]any
	require.NoError(t, json.Unmarshal(b, &tok))
	added, _ := tok["added_tokens"].([]any)
	tok["added_tokens"] = append(added, map[string]any{"id": 256, "content": "<|extra|>", "single_word": false,
		"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	b, err = json.Marshal(tok)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(out, "tokenizer.json"), b, 0o644))
	return out
}

// TestGenerateDraft: generate and chat with -draft-model write the text
// they write without one (greedy: the model's own tokens), and the figures
// tell how many drafted tokens the model kept; what speculative decoding
// cannot do is refused before anything loads, and a draft of another
// vocabulary once it has.
func TestGenerateDraft(t *testing.T) {
	dir := tiny(t, nil)
	gen := func(args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := run(append([]string{"generate", "-m", dir, "-p", "hello there", "-n", "24"}, args...), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	want, _, err := gen()
	require.NoError(t, err)
	for _, k := range []string{"1", "3", "5"} {
		got, figures, err := gen("-draft-model", dir, "-num-draft-tokens", k)
		require.NoError(t, err)
		assert.Equal(t, want, got, "-num-draft-tokens %s", k)
		assert.Regexp(t, `Draft: \d+ of \d+ drafted tokens accepted \(100\.0%\)`, figures, "a model drafting for itself agrees with itself")
	}

	got, figures, err := gen("-lookup", "-num-draft-tokens", "4")
	require.NoError(t, err)
	assert.Equal(t, want, got, "-lookup")
	assert.Regexp(t, `Draft: \d+ of \d+ drafted tokens accepted`, figures)

	var stdout bytes.Buffer
	err = runIO([]string{"chat", "-m", dir, "-n", "12", "-draft-model", dir, "-verbose=false"}, strings.NewReader("hi\nhow are you\n"), &stdout, &bytes.Buffer{})
	require.NoError(t, err)
	var plain bytes.Buffer
	require.NoError(t, runIO([]string{"chat", "-m", dir, "-n", "12", "-verbose=false"}, strings.NewReader("hi\nhow are you\n"), &plain, &bytes.Buffer{}))
	assert.Equal(t, plain.String(), stdout.String(), "a chat's turns with a draft are those without")

	base := []string{"generate", "-m", dir, "-p", "hello there", "-n", "24"}
	checkCLIErrors(t, []cliError{
		{append(base, "-draft-model", dir, "-num-draft-tokens", "0"), "", true, "-num-draft-tokens 0: want at least 1"},
		{append(base, "-draft-model", dir, "-grammar", "x.gbnf"), "", true, "-draft-model and a constraint (-json-schema, -grammar) exclude each other"},
		{append(base, "-draft-model", dir, "-repetition-penalty", "1.3"), "", true, "-draft-model and -repetition-penalty exclude each other"},
		{append(base, "-draft-model", dir, "-max-kv-size", "64"), "", true, "-draft-model and -max-kv-size exclude each other"},
		{append(base, "-draft-model", smolLM2), "", false, "the draft model's vocabulary of 49152 tokens is larger than the model's 256"},
		{append(base, "-draft-model", swappedTokens(t, dir)), "", false, "the draft model's tokenizer reads id"},
		{append(base, "-draft-model", extraToken(t, dir)), "", false, "the draft model's tokenizer has 257 tokens and the model's 256"},
		{append(base, "-draft-model", dir, "-lookup"), "", true, "-draft-model and -lookup exclude each other"},
		{append(base, "-lookup", "-repetition-penalty", "1.3"), "", true, "-lookup and -repetition-penalty exclude each other"},
	})
}

// TestServeDraft: archrun serve -draft-model drafts for a request running
// alone: a greedy chat's reply is the one without drafts ("speculative":
// false), and its usage counts the drafted tokens kept and rejected as
// OpenAI counts a prediction's (the model drafting for itself keeps every
// one); a draft of another tokenizer is refused at start.
func TestServeDraft(t *testing.T) {
	dir := tiny(t, nil)
	bin := serverBinary(t)
	_, base, stderr := startServer(t, bin, "-model", dir, "-draft-model", dir, "-num-draft-tokens", "4", "-served-model-name", "tiny")
	client := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")},
		MaxTokens:   openai.Int(24),
		Temperature: openai.Float(0),
	}
	ctx := context.Background()
	with, err := client.Chat.Completions.New(ctx, params)
	require.NoError(t, err, stderr.String())
	without, err := client.Chat.Completions.New(ctx, params, option.WithJSONSet("speculative", false))
	require.NoError(t, err, stderr.String())
	assert.Equal(t, without.Choices[0].Message.Content, with.Choices[0].Message.Content)
	d := with.Usage.CompletionTokensDetails
	assert.Positive(t, d.AcceptedPredictionTokens, "drafted tokens kept")
	assert.Zero(t, d.RejectedPredictionTokens, "a model drafting for itself")
	assert.Zero(t, without.Usage.CompletionTokensDetails.AcceptedPredictionTokens)

	cmd := exec.Command(bin, "serve", "-port", "0", "-model", dir, "-draft-model", swappedTokens(t, dir))
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "the draft model's tokenizer reads id")
}
