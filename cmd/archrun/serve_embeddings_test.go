package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
)

// openaiEmbeddingsScript drives /v1/embeddings with the official openai
// Python client: its default request (base64, which the client decodes),
// floats, dimensions, token ids, and two refusals. argv: the base URL and
// a JSON file of the texts and the vectors the library gives them.
const openaiEmbeddingsScript = `
import json, sys
import openai
from openai import OpenAI

base, want = sys.argv[1], json.load(open(sys.argv[2]))
client = OpenAI(base_url=base, api_key="unused", max_retries=0)


def close(got, exp, what):
    assert len(got) == len(exp), (what, len(got), len(exp))
    for i, (g, e) in enumerate(zip(got, exp)):
        assert len(g.embedding) == len(e), (what, i, len(g.embedding), len(e))
        d = max(abs(a - b) for a, b in zip(g.embedding, e))
        assert d <= 1e-6, (what, i, d)
        assert g.index == i, (what, g.index, i)


r = client.embeddings.create(model="smollm2", input=want["texts"])
close(r.data, want["vectors"], "default (base64)")
assert r.model == "smollm2" and r.object == "list", r
assert r.usage.prompt_tokens == want["tokens"] == r.usage.total_tokens, r.usage
r = client.embeddings.create(model="smollm2", input=want["texts"], encoding_format="float")
close(r.data, want["vectors"], "float")
r = client.embeddings.create(model="smollm2", input=want["texts"][0], dimensions=32)
close(r.data, want["cut"], "dimensions")
r = client.embeddings.create(model="smollm2", input=[want["ids"]])
close(r.data, want["by_ids"], "token ids")

for kwargs, param, code in [
    (dict(input=want["texts"], dimensions=100000), "dimensions", "invalid_value"),
    (dict(input=[[1], [1] * (want["context"] + 1)]), "input[1]", "context_length_exceeded"),
]:
    try:
        client.embeddings.create(model="smollm2", **kwargs)
        raise SystemExit(f"{param}: no error")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == param and e.body["code"] == code, e.body
        print(f"{param}: {e.body['message']}")
print("all checks passed")
`

// TestServeEmbeddingsOpenAIClient: archrun serve on SmolLM2 answers the
// openai Python client's and openai-go's embedding requests with the
// vectors archgen.Embed gives the same texts.
func TestServeEmbeddingsOpenAIClient(t *testing.T) {
	python, err := filepath.Abs("../../.deps/py/bin/python")
	require.NoError(t, err)
	_, err = os.Stat(smolLM2)
	require.NoError(t, err, "run `make models` first")
	ctx := context.Background()

	texts := []string{"The cat sat on the mat.", "Paris is the capital of France.", "Embeddings!"}
	m, err := archgen.Load(ctx, smolLM2, archgen.LoadOptions{})
	require.NoError(t, err)
	vectors, err := m.Embed(ctx, texts, archgen.EmbedOptions{})
	require.NoError(t, err)
	cut, err := m.Embed(ctx, texts[:1], archgen.EmbedOptions{Dimensions: 32})
	require.NoError(t, err)
	ids := []int32{1, 504, 2444, 314}
	byIDs, err := m.EmbedTokens(ctx, [][]int32{ids}, archgen.EmbedOptions{})
	require.NoError(t, err)
	tokens := 0
	for _, s := range texts {
		enc, err := m.EncodeEmbedInput(s)
		require.NoError(t, err)
		tokens += len(enc)
	}
	ctxLen := m.ContextLength()
	require.Positive(t, ctxLen)
	m.Free()
	data, err := json.Marshal(map[string]any{"texts": texts, "vectors": vectors, "cut": cut, "ids": ids,
		"by_ids": byIDs, "tokens": tokens, "context": ctxLen})
	require.NoError(t, err)
	want := filepath.Join(t.TempDir(), "want.json")
	require.NoError(t, os.WriteFile(want, data, 0o644))
	script := filepath.Join(t.TempDir(), "openai_embeddings.py")
	require.NoError(t, os.WriteFile(script, []byte(openaiEmbeddingsScript), 0o644))

	bin := serverBinary(t)
	_, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2")
	out, err := exec.Command(python, script, base, want).CombinedOutput()
	t.Logf("openai client:\n%s", out)
	require.NoError(t, err, "server log:\n%s", stderr.String())
	require.Contains(t, string(out), "all checks passed")

	// openai-go: floats and base64 (which it leaves to the caller).
	client := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	r, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model:          "smollm2",
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat,
	})
	require.NoError(t, err)
	require.Len(t, r.Data, len(texts))
	for i, d := range r.Data {
		assert.Equal(t, int64(i), d.Index)
		require.Len(t, d.Embedding, len(vectors[i]))
		for k, x := range d.Embedding {
			assert.LessOrEqual(t, math.Abs(x-float64(vectors[i][k])), 1e-6, "input %d, value %d", i, k)
		}
	}
	assert.Equal(t, int64(tokens), r.Usage.PromptTokens)
	_, err = client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "smollm2",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", ""}},
	})
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, 400, apiErr.StatusCode)
	assert.Equal(t, "input[1]", apiErr.Param)
}
