package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/archgen/archgen"
)

// MaxEmbeddingInputs is the most inputs POST /v1/embeddings takes in one
// request (as OpenAI's API does); more are refused with limit_exceeded.
const MaxEmbeddingInputs = 2048

// embedChunk is how many of an input's tokens go through the model at
// once (archgen.EmbedOptions.PrefillStep): smaller than a generation's
// prefill chunk, so that the decode loop beside it is held up less.
const embedChunk = 256

// embeddingsRequest is the body of POST /v1/embeddings. user is taken and
// ignored, as other servers of the API do.
type embeddingsRequest struct {
	Input          json.RawMessage `json:"input"`
	Model          *string         `json:"model"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           json.RawMessage `json:"user"`
}

// The embedding gate (Server.embedGate) lets one embedding request
// compute at a time.
//
// Embeddings do not go through the batching engine. A request's inputs
// run one after another through the model's hidden states
// (Model.EmbedTokens), beside the engine's decode loop, which keeps
// stepping its rows: an embedding request never waits for generations to
// finish, and a generation never waits for an embedding request to
// finish. The cost is shared instead: while an embedding computes, it
// takes the CPU from the decode steps, which slow down, and its
// activations are memory beyond the engine's KV budget. The gate bounds
// both to one request at a time (others wait for it, or until their
// client leaves or RequestTimeout passes), and inputs run in chunks of
// embedChunk tokens, so that a decode step is queued behind one chunk's
// work at most. Measured on SmolLM2-135M on 2 cores: two inputs of 1,600
// tokens took 17 s while a stream beside them went on at 15 tokens a
// second (70 alone), its longest pause 0.7 s; in chunks of 2,048 they took
// 14 s and the stream got 6 tokens a second, pausing up to 0.9 s.

// embeddings answers POST /v1/embeddings: each input's pooled final hidden
// states (archgen.Model.Embed: the last token's by default, or the mean
// with Options.EmbedPooling), L2-normalized, truncated to dimensions and
// renormalized where it is given, as floats or as base64 of their
// little-endian float32 bytes.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingsRequest
	if e := s.decode(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	j := &job{}
	if e := s.checkModel(req.Model, j); e != nil {
		writeError(w, e)
		return
	}
	inputs, e := s.embeddingInputs(req.Input)
	if e != nil {
		writeError(w, e)
		return
	}
	base64Format := false
	if f := req.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			base64Format = true
		default:
			writeError(w, badRequest("encoding_format", "invalid_value", "encoding_format: %q, want \"float\" or \"base64\"", *f))
			return
		}
	}
	opts := s.embedOpts
	opts.PrefillStep = embedChunk
	if d := req.Dimensions; d != nil {
		if size := opts.VectorSize(s.m.Net.Info().Hidden); *d < 1 || *d > size {
			writeError(w, badRequest("dimensions", "invalid_value", "dimensions: %d, want 1 to the size of the model's embeddings, %d", *d, size))
			return
		}
		opts.Dimensions = *d
	}
	tokens := 0
	for _, in := range inputs {
		tokens += len(in)
	}
	if entry := entryOf(w); entry != nil {
		entry.prompt = tokens
	}

	var vecs [][]float32
	if !s.underGate(w, r, func(ctx context.Context) (err error) {
		vecs, err = s.m.EmbedTokens(ctx, inputs, opts)
		return err
	}) {
		return
	}

	data := make([]map[string]any, len(vecs))
	for i, v := range vecs {
		var emb any = v
		if base64Format {
			b := make([]byte, 4*len(v))
			for k, x := range v {
				binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   data,
		"model":  j.model,
		"usage":  map[string]any{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// underGate runs work (an embedding or rerank request's computation) as
// one of the requests under way, holding the embedding gate, under the
// request's context; it answers a server going down, a client gone or
// timed out while waiting, and work's error, and reports whether work
// completed (the caller then answers).
func (s *Server) underGate(w http.ResponseWriter, r *http.Request, work func(ctx context.Context) error) bool {
	if s.stopping.Load() {
		writeError(w, errShuttingDown)
		return false
	}
	s.running.Add(1)
	defer s.running.Add(-1)
	ctx, cancel := s.requestContext(r)
	defer cancel()
	select {
	case s.embedGate <- struct{}{}:
	case <-ctx.Done():
		s.embeddingFailed(w, ctx.Err())
		return false
	}
	err := work(ctx)
	<-s.embedGate
	if err != nil {
		s.embeddingFailed(w, err)
		return false
	}
	return true
}

// embeddingFailed answers an embedding or rerank request that did not
// complete (an *apiError as it is).
func (s *Server) embeddingFailed(w http.ResponseWriter, err error) {
	var ie *archgen.EmbedInputError
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		writeError(w, ae)
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, &apiError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "request_timeout",
			Message: fmt.Sprintf("the embeddings took longer than this server's request timeout of %v", s.opts.RequestTimeout)})
	case errors.Is(err, context.Canceled):
		// the client left; nobody reads the answer
	case errors.As(err, &ie) && ie.Context > 0:
		writeError(w, badRequest(fmt.Sprintf("input[%d]", ie.Index), "context_length_exceeded", "%v", err))
	case errors.As(err, &ie):
		writeError(w, badRequest(fmt.Sprintf("input[%d]", ie.Index), "invalid_value", "%v", err))
	default:
		s.logf("POST /v1/embeddings: %v", err)
		writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
			Message: fmt.Sprintf("embeddings: %v", err)})
	}
}

// embeddingInputs reads input (a string, an array of strings, an array of
// token ids, or an array of arrays of token ids) as the token ids of each
// input, checked against the vocabulary, the server's limits and the
// model's context.
func (s *Server) embeddingInputs(raw json.RawMessage) ([][]int32, *apiError) {
	const want = "a string, an array of strings, an array of token ids or an array of arrays of token ids"
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "missing_input", "input: missing; give %s", want)
	}
	// Each form is tried on fresh values: a failed Unmarshal leaves what
	// it decoded before the error.
	var one string
	var texts []string
	var ids []int64
	var lists [][]int64
	switch {
	case json.Unmarshal(raw, &one) == nil:
		texts = []string{one}
	case json.Unmarshal(raw, &texts) == nil:
	case json.Unmarshal(raw, &ids) == nil:
		texts, lists = nil, [][]int64{ids}
	case json.Unmarshal(raw, &lists) == nil:
		texts = nil
	default:
		return nil, badRequest("input", "invalid_type", "input: want %s", want)
	}
	n := len(texts) + len(lists)
	if n == 0 {
		return nil, badRequest("input", "empty_input", "input: an empty array; give at least one input")
	}
	if n > MaxEmbeddingInputs {
		return nil, over("input", "input: %d inputs, more than this server takes in one request (%d)", n, MaxEmbeddingInputs)
	}
	out := make([][]int32, n)
	vocab := s.m.Net.Info().VocabSize
	for i, t := range texts {
		if t == "" {
			return nil, badRequest(fmt.Sprintf("input[%d]", i), "empty_input", "input[%d]: an empty string", i)
		}
		enc, err := s.m.EncodeEmbedInput(t)
		if err != nil {
			return nil, badRequest("input", "invalid_value", "input: %v", err)
		}
		out[i] = enc
	}
	for i, l := range lists {
		out[i] = make([]int32, len(l))
		for p, id := range l {
			if id < 0 || id >= int64(vocab) {
				return nil, badRequest(fmt.Sprintf("input[%d]", i), "invalid_value",
					"input[%d]: token %d (position %d) is outside the vocabulary of %d", i, id, p, vocab)
			}
			out[i][p] = int32(id)
		}
	}
	limit := s.opts.ContextLength
	if limit <= 0 {
		limit = s.m.ContextLength()
	}
	for i, in := range out {
		field := fmt.Sprintf("input[%d]", i)
		switch {
		case len(in) == 0:
			return nil, badRequest(field, "empty_input", "%s: no tokens", field)
		case s.opts.Limits.PromptTokens > 0 && len(in) > s.opts.Limits.PromptTokens:
			return nil, over(field, "%s: %d tokens, more than this server takes in an input (%d)", field, len(in), s.opts.Limits.PromptTokens)
		case limit > 0 && len(in) > limit:
			return nil, badRequest(field, "context_length_exceeded", "%s: %d tokens, more than the model's context of %d", field, len(in), limit)
		}
	}
	return out, nil
}
