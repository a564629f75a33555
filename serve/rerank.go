package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/archgen/archgen"
)

// MaxRerankDocuments is the most documents POST /v1/rerank takes in one
// request; more are refused with limit_exceeded.
const MaxRerankDocuments = 1024

// documentError names the document an input refusal is about: the pair's
// index is the document's (embeddingFailed answers it with that field).
func documentError(err error) error {
	var ie *archgen.EmbedInputError
	if !errors.As(err, &ie) {
		return err
	}
	field := fmt.Sprintf("documents[%d]", ie.Index)
	if ie.Context > 0 {
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: field, Code: "context_length_exceeded",
			Message: fmt.Sprintf("%s: the query and the document are %d tokens together, more than the model's context of %d", field, ie.Tokens, ie.Context)}
	}
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: field, Code: "invalid_value",
		Message: fmt.Sprintf("%s: %s", field, ie.Msg)}
}

// rerankRequest is the body of POST /v1/rerank (and /rerank), as
// llama-server, vLLM, Jina and Cohere take it: documents are strings or
// objects with a text field.
type rerankRequest struct {
	Model           *string           `json:"model"`
	Query           *string           `json:"query"`
	Documents       []json.RawMessage `json:"documents"`
	TopN            *int              `json:"top_n"`
	ReturnDocuments *bool             `json:"return_documents"`
	RawScores       *bool             `json:"raw_scores"`
}

// rerank answers POST /v1/rerank with a cross-encoder (archgen.Model.Rerank):
// each document's relevance to the query, the results in order of
// relevance (the best first), top_n of them where it is given, each with
// its index in documents and, with return_documents, its text. The
// relevance is what sentence-transformers' CrossEncoder gives for the
// checkpoint (a sigmoid of the logit unless its config says otherwise);
// raw_scores gives the logits. It runs under the embedding gate, one
// request at a time beside the decode loop, as embeddings do.
func (s *Server) rerank(w http.ResponseWriter, r *http.Request) {
	var req rerankRequest
	if e := s.decode(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	j := &job{}
	if e := s.checkModel(req.Model, j); e != nil {
		writeError(w, e)
		return
	}
	if n := s.m.Labels(); n != 1 {
		msg := "the model has no classifier head: rerank needs a cross-encoder (an encoder checkpoint with a classifier, such as BertForSequenceClassification)"
		if n > 1 {
			msg = fmt.Sprintf("the model's classifier gives %d scores per pair; a reranker gives one", n)
		}
		writeError(w, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "model_not_supported", Message: msg})
		return
	}
	switch {
	case req.Query == nil:
		writeError(w, badRequest("query", "missing_query", "query: missing; give the text the documents are ranked against"))
		return
	case *req.Query == "":
		writeError(w, badRequest("query", "empty_input", "query: an empty string"))
		return
	case req.Documents == nil:
		writeError(w, badRequest("documents", "missing_documents", "documents: missing; give an array of strings (or of objects with a text field)"))
		return
	case len(req.Documents) == 0:
		writeError(w, badRequest("documents", "empty_input", "documents: an empty array; give at least one"))
		return
	case len(req.Documents) > MaxRerankDocuments:
		writeError(w, over("documents", "documents: %d, more than this server takes in one request (%d)", len(req.Documents), MaxRerankDocuments))
		return
	case req.TopN != nil && *req.TopN < 1:
		writeError(w, badRequest("top_n", "invalid_value", "top_n: %d, want 1 or more", *req.TopN))
		return
	}
	docs := make([]string, len(req.Documents))
	for i, raw := range req.Documents {
		field := fmt.Sprintf("documents[%d]", i)
		var obj struct {
			Text *string `json:"text"`
		}
		switch {
		case json.Unmarshal(raw, &docs[i]) == nil:
		case json.Unmarshal(raw, &obj) == nil && obj.Text != nil:
			docs[i] = *obj.Text
		default:
			writeError(w, badRequest(field, "invalid_type", "%s: want a string or an object with a text field", field))
			return
		}
		if docs[i] == "" {
			writeError(w, badRequest(field, "empty_input", "%s: an empty string", field))
			return
		}
	}

	opts := archgen.RerankOptions{RawScores: req.RawScores != nil && *req.RawScores}
	var scores []float64
	var tokens int
	if !s.underGate(w, r, func(ctx context.Context) (err error) {
		scores, tokens, err = s.m.Rerank(ctx, *req.Query, docs, opts)
		return documentError(err)
	}) {
		return
	}
	if entry := entryOf(w); entry != nil {
		entry.prompt = tokens
	}
	order := make([]int, len(scores))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return scores[order[a]] > scores[order[b]] })
	if req.TopN != nil && *req.TopN < len(order) {
		order = order[:*req.TopN]
	}
	results := make([]map[string]any, len(order))
	for k, i := range order {
		res := map[string]any{"index": i, "relevance_score": scores[i]}
		if req.ReturnDocuments != nil && *req.ReturnDocuments {
			res["document"] = map[string]any{"text": docs[i]}
		}
		results[k] = res
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object":  "list",
		"model":   j.model,
		"results": results,
		"usage":   map[string]any{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}
