// llama-logits: llama.cpp's logits for a sequence of token ids, the
// reference the GGUF parity tests hold archgen to; and its tokenization of
// texts, the reference of the GGUF tokenizer tests.
//
//   llama-logits MODEL.gguf OUT.npy ID [ID ...]
//   llama-logits --embed MODEL.gguf OUT.npy ID [ID ...]
//   llama-logits --tokenize MODEL.gguf TEXTS OUT
//
// Runs the ids through the model as one batch (positions 0..n-1, one
// sequence) and writes every position's logits as a float32 .npy array
// [n, vocab]. The KV cache is float32 (llama.cpp's default is float16), so
// that the reference carries the weights' error and llama.cpp's own
// arithmetic, not a rounding of the cache. With --embed (an embedding
// model: BERT, nomic-bert) it writes every position's final hidden state
// instead, [n, n_embd], unpooled (llama.cpp's pooling "none"), with flash
// attention off (on, llama.cpp rounds the keys and values to float16).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) {
    std::fputs(text, stderr);
  }
}

// --tokenize: the texts of TEXTS (UTF-8, each ended by a NUL byte)
// through the file's vocabulary alone (vocab_only), special tokens in the
// text read as such; OUT gets two lines a text, the ids without and then
// with the vocabulary's added tokens (BOS, EOS), space-separated.
static int tokenize(const char* model_path, const char* texts_path, const char* out_path) {
  std::ifstream in(texts_path, std::ios::binary);
  if (!in) {
    std::perror(texts_path);
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(model_path, mp);
  if (model == nullptr) {
    std::fprintf(stderr, "%s: llama.cpp cannot load it\n", model_path);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  FILE* f = std::fopen(out_path, "w");
  if (f == nullptr) {
    std::perror(out_path);
    return 1;
  }
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    const std::string text = all.substr(start, end - start);
    for (bool add : {false, true}) {
      std::vector<llama_token> ids(text.size() + 8);
      int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                             static_cast<int32_t>(ids.size()), add, true);
      if (n < 0) {
        ids.resize(-n);
        n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                           static_cast<int32_t>(ids.size()), add, true);
      }
      for (int i = 0; i < n; i++) std::fprintf(f, i ? " %d" : "%d", ids[i]);
      std::fputc('\n', f);
    }
    start = end + 1;
  }
  std::fclose(f);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

// writeNpy writes rows float32 rows of cols values each, row i read from
// row(i), as a .npy version 1.0 file.
template <typename Row>
static int writeNpy(const char* path, int rows, int cols, Row row) {
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr) {
    std::perror(path);
    return 1;
  }
  // magic, header length, a dict padded to 64 bytes
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) +
                     ", " + std::to_string(cols) + "), }";
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict.push_back('\n');
  const unsigned short hlen = static_cast<unsigned short>(dict.size());
  std::fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  std::fwrite(&hlen, 2, 1, f);
  std::fwrite(dict.data(), 1, dict.size(), f);
  for (int i = 0; i < rows; i++) {
    std::fwrite(row(i), sizeof(float), cols, f);
  }
  std::fclose(f);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--tokenize") == 0) {
    return tokenize(argv[2], argv[3], argv[4]);
  }
  const bool embed = argc > 1 && std::strcmp(argv[1], "--embed") == 0;
  if (embed) {
    argv++;
    argc--;
  }
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s [--embed] MODEL.gguf OUT.npy ID [ID ...]\n       %s --tokenize MODEL.gguf TEXTS OUT\n",
                 argv[0], argv[0]);
    return 2;
  }
  std::vector<llama_token> ids;
  for (int i = 3; i < argc; i++) {
    ids.push_back(static_cast<llama_token>(std::atoi(argv[i])));
  }
  const int n = static_cast<int>(ids.size());
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) {
    std::fprintf(stderr, "%s: llama.cpp cannot load it\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n < 64 ? 64 : n;
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  if (embed) {
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_NONE;
    // Flash attention would cast the keys and values to float16.
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "%s: no context\n", argv[1]);
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; i++) {
    batch.token[i] = ids[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "%s: llama_decode failed\n", argv[1]);
    return 1;
  }
  int rc;
  if (embed) {
    rc = writeNpy(argv[2], n, llama_model_n_embd(model), [&](int i) { return llama_get_embeddings_ith(ctx, i); });
  } else {
    rc = writeNpy(argv[2], n, vocab, [&](int i) { return llama_get_logits_ith(ctx, i); });
  }
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return rc;
}
