// Package tokenizer reads the tokenizer of a Hugging Face checkpoint
// (tokenizer.json, and tokenizer_config.json beside it) and turns text into
// token ids and ids back into text, as the Hugging Face tokenizers library
// does.
//
// It covers the BPE tokenizers of current checkpoints, in both families,
// the WordPiece tokenizers of BERT-style encoders and the Unigram
// tokenizers of XLM-RoBERTa-style ones:
//
//   - byte-level BPE (GPT-2, Llama 3, Qwen2/3, SmolLM, StarCoder2): a
//     regular-expression split, then each byte mapped to a printable
//     character before the merges;
//   - sentencepiece-style BPE (Llama 2, Mistral, Gemma): spaces become ▁ (a
//     Prepend and Replace normalizer, or a Metaspace pre-tokenizer), and
//     characters the vocabulary lacks fall back to <0xXX> byte tokens;
//   - WordPiece (BERT, MiniLM and the sentence-transformers encoders and
//     cross-encoder rerankers built on them): BERT's normalizer (control
//     characters dropped, spaces around CJK ideographs, accents stripped,
//     lowercase) and pre-tokenizer (whitespace and punctuation), then the
//     longest vocabulary piece first, ## before the pieces inside a word;
//   - Unigram (XLM-RoBERTa and the multilingual encoders built on it:
//     bge-m3, multilingual-e5, bge-reranker-v2-m3,
//     paraphrase-multilingual-*): sentencepiece's compiled normalization
//     rules (the Precompiled normalizer: NFKC-like folding, applied grapheme
//     cluster by grapheme cluster as the tokenizers library applies them,
//     with the Unicode 17 clusters of the library's segmenter), a Metaspace
//     pre-tokenizer, then the cutting of each piece whose scores sum
//     highest; a run of characters no piece spells is one unknown token, or
//     its <0xXX> byte tokens with byte_fallback.
//
// The parts of tokenizer.json it reads: added_tokens (with single_word,
// lstrip, rstrip, normalized and special); the normalizers NFC, NFD, NFKC,
// NFKD, Lowercase, Prepend, Replace, Strip, BertNormalizer, Precompiled and
// Sequence, and archgen's own LlamaCppWordPiece (lowercase, strip_accents:
// the text prepared as llama.cpp prepares it for a GGUF file's WordPiece
// vocabulary, which the gguf package writes);
// the pre-tokenizers ByteLevel, Split, Metaspace, Digits, Whitespace,
// WhitespaceSplit, BertPreTokenizer and Sequence; the BPE model
// (byte_fallback, fuse_unk, ignore_merges, continuing_subword_prefix,
// end_of_word_suffix), the WordPiece model (unk_token,
// continuing_subword_prefix, max_input_chars_per_word) and the Unigram
// model (vocab of [piece, score] pairs, unk_id, byte_fallback); the
// post-processors
// TemplateProcessing (single and pair templates, with type ids),
// ByteLevel, BertProcessing, RobertaProcessing and Sequence; and the
// decoders ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace,
// WordPiece and Sequence. Anything else is an error that names its key.
// The truncation and padding settings are read and ignored: Encode and
// EncodePair never cut or pad a sequence, and callers refuse inputs
// longer than their model takes. Other models (WordLevel), BPE dropout,
// Unigram sampling and offsets are not supported, and neither is a Unigram
// model without an unk_id, which the tokenizers library loads but cannot
// encode a character its vocab lacks with.
//
// Encode encodes one text; EncodeWithTypes also gives each token's type
// id; EncodePair encodes a pair of texts (a query and a document for a
// cross-encoder) with the post-processor's pair layout and the type ids
// that tell the two apart.
//
// LoadFile reads a tokenizer.json as the tokenizers library does. Load reads
// a checkpoint folder: it also reads tokenizer_config.json (special tokens,
// chat template) and, where tokenizer_class is LlamaTokenizer or
// XLMRobertaTokenizer, rebuilds the pipeline as transformers 5's
// AutoTokenizer does. For XLMRobertaTokenizer that is a whitespace split
// before its Metaspace pre-tokenizer, the Precompiled normalizer alone, the
// unknown piece at id 3 and only the configured special tokens (and
// added_tokens_decoder's) as added tokens, which changes the ids of texts
// with runs of spaces, leading or trailing spaces, or <mask>, <pad> and
// <unk> written out, from what tokenizer.json alone gives.
//
// A Stream decodes ids one at a time during generation and returns text
// only once its characters are complete. The chat subpackage renders the
// chat templates of tokenizer_config.json.
package tokenizer
