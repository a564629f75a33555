package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
)

// miniLM is the real encoder `make models` fetches.
const miniLM = "../../.deps/models/all-MiniLM-L6-v2"

// encoderRef runs testdata/encoders/ref.py (mlx-embeddings) on jobs.
func encoderRef(t *testing.T, python string, jobs []map[string]any) []map[string]any {
	t.Helper()
	req, _ := json.Marshal(jobs)
	cmd := exec.Command(python, "../../testdata/encoders/ref.py")
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "ref.py: %s", stderr.String())
	var refs []map[string]any
	require.NoError(t, json.Unmarshal(out, &refs))
	return refs
}

// encoderClientScript drives an encoder's server with the official openai
// Python client (embeddings, and the refusal of a chat) and plain HTTP
// (POST /v1/rerank, which the client has no method for). argv: the embedding
// server's base URL, the reranking server's, and a JSON file of the
// references.
const encoderClientScript = `
import json, math, sys, urllib.error, urllib.request
from json import dumps, loads
import openai
from openai import OpenAI


class Reply:
    def __init__(self, status, text):
        self.status_code, self.text = status, text

    def json(self):
        return loads(self.text)


def post(url, json=None):
    req = urllib.request.Request(url, data=dumps(json).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return Reply(r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.read().decode())

embed_base, rerank_base, want = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
client = OpenAI(base_url=embed_base, api_key="unused", max_retries=0)

r = client.embeddings.create(model="minilm", input=want["texts"])
assert len(r.data) == len(want["embeds"])
for i, (got, exp) in enumerate(zip(r.data, want["embeds"])):
    d = max(abs(a - b) for a, b in zip(got.embedding, exp))
    assert d <= 1e-5, ("embedding", i, d)
assert r.usage.prompt_tokens == sum(len(x) for x in want["ids"]), r.usage
try:
    client.chat.completions.create(model="minilm", messages=[{"role": "user", "content": "hi"}])
    raise SystemExit("a chat on an encoder: no error")
except openai.BadRequestError as e:
    assert e.body["code"] == "model_not_supported", e.body
    print("chat:", e.body["message"])
r = post(embed_base + "/rerank", json={"query": "q", "documents": ["d"]})
assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_supported", r.text

# The cross-encoder: relevances are the sigmoid of mlx-embeddings' logits.
logits = want["logits"]
relevance = [1 / (1 + math.exp(-x)) for x in logits]
body = {"model": "ce", "query": want["query"], "documents": want["docs"]}
r = post(rerank_base + "/rerank", json=body)
assert r.status_code == 200, r.text
res = r.json()
order = sorted(range(len(logits)), key=lambda i: -logits[i])
assert [x["index"] for x in res["results"]] == order, res
for x in res["results"]:
    assert abs(x["relevance_score"] - relevance[x["index"]]) <= 1e-5, x
    assert "document" not in x
assert res["usage"]["prompt_tokens"] == sum(len(x) for x in want["pair_ids"]), res["usage"]
r = post(rerank_base.removesuffix("/v1") + "/rerank", json={**body, "top_n": 2, "return_documents": True, "raw_scores": True,
    "documents": [{"text": d} for d in want["docs"]]})
res = r.json()
assert r.status_code == 200 and len(res["results"]) == 2, r.text
for x in res["results"]:
    assert abs(x["relevance_score"] - logits[x["index"]]) <= 2e-5, x
    assert x["document"]["text"] == want["docs"][x["index"]], x

for extra, param, code in [
    ({"query": None}, "query", "missing_query"),
    ({"documents": []}, "documents", "empty_input"),
    ({"documents": ["a", 3]}, "documents[1]", "invalid_type"),
    ({"top_n": 0}, "top_n", "invalid_value"),
    ({"documents": ["word " * 300]}, "documents[0]", "context_length_exceeded"),
    ({"documents": ["a"] * 1025}, "documents", "limit_exceeded"),
]:
    req = {k: v for k, v in {**body, **extra}.items() if v is not None}
    r = post(rerank_base + "/rerank", json=req)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param and err["code"] == code, (extra, r.text)
    print(f"{param}: {err['message']}")
print("all checks passed")
`

// TestServeEncoder: archrun serve on the real all-MiniLM-L6-v2 answers the
// openai client's embedding requests with mlx-embeddings' vectors and
// refuses chats and reranks (it has no classifier); on a random BERT
// cross-encoder with MiniLM's tokenizer, POST /v1/rerank (and /rerank)
// ranks documents by mlx-embeddings' logits, with top_n, documents as
// objects, return_documents and raw_scores, and refuses bad requests by
// field.
func TestServeEncoder(t *testing.T) {
	python, err := filepath.Abs("../../.deps/py/bin/python")
	require.NoError(t, err)
	_, err = os.Stat(miniLM)
	require.NoError(t, err, "run `make models` first")
	texts := []string{"A man is eating food.", "Someone is riding a horse.", "naïve café 日本語"}
	query := "What do cats eat?"
	docs := []string{"Cats are carnivores: they eat meat.", "The stock market fell on Tuesday.", "Kittens drink milk, then eat fish or chicken."}

	ce := filepath.Join(t.TempDir(), "cross-encoder")
	cfg := map[string]any{"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
		"intermediate_size": 64, "max_position_embeddings": 128, "vocab_size": 30522, "type_vocab_size": 2}
	encoderRef(t, python, []map[string]any{{"make": ce, "arch": "bert", "config": cfg, "seed": 5, "layout": "prefixed", "labels": 1}})
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		data, err := os.ReadFile(filepath.Join(miniLM, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(ce, f), data, 0o644))
	}
	var pairs [][]string
	for _, d := range docs {
		pairs = append(pairs, []string{query, d})
	}
	refs := encoderRef(t, python, []map[string]any{
		{"run": miniLM, "arch": "bert", "texts": texts},
		{"run": ce, "arch": "bert", "pairs": pairs},
	})
	var logits []float64
	for _, s := range refs[1]["scores"].([]any) {
		logits = append(logits, s.([]any)[0].(float64))
	}
	data, err := json.Marshal(map[string]any{"texts": texts, "embeds": refs[0]["embeds"], "ids": refs[0]["ids"],
		"query": query, "docs": docs, "logits": logits, "pair_ids": refs[1]["ids"]})
	require.NoError(t, err)
	want := filepath.Join(t.TempDir(), "want.json")
	require.NoError(t, os.WriteFile(want, data, 0o644))
	script := filepath.Join(t.TempDir(), "encoder_client.py")
	require.NoError(t, os.WriteFile(script, []byte(encoderClientScript), 0o644))

	bin := serverBinary(t)
	_, embedBase, stderr := startServer(t, bin, "-model", miniLM, "-served-model-name", "minilm")
	require.Contains(t, stderr.String(), "an encoder: embeddings, no generation")
	_, rerankBase, stderr2 := startServer(t, bin, "-model", ce, "-served-model-name", "ce")
	out, err := exec.Command(python, script, embedBase, rerankBase, want).CombinedOutput()
	t.Logf("clients:\n%s", out)
	require.NoError(t, err, "server logs:\n%s\n%s", stderr.String(), stderr2.String())
	require.Contains(t, string(out), "all checks passed")
}

// TestEncoderDoesNotGenerate: generate, chat, greedy and logits on an
// encoder are refused with archgen.ErrEncoder, naming what it does.
func TestEncoderDoesNotGenerate(t *testing.T) {
	if _, err := os.Stat(miniLM); err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	for _, args := range [][]string{
		{"generate", "-model", miniLM, "-prompt", "hello", "-max-tokens", "2", "-ignore-chat-template"},
		{"chat", "-model", miniLM},
		{"greedy", "-model", miniLM, "-tokens", "101,102", "-n", "2"},
		{"logits", "-model", miniLM, "-tokens", "101,102", "-out", filepath.Join(t.TempDir(), "l.npy")},
	} {
		err := run(args, &bytes.Buffer{}, &bytes.Buffer{})
		if !errors.Is(err, archgen.ErrEncoder) || !strings.Contains(err.Error(), "(bert) embeds (Embed, archrun embed, /v1/embeddings)") {
			t.Errorf("archrun %s: %v, want archgen.ErrEncoder", args[0], err)
		}
	}
}
