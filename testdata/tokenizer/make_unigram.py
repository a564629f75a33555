"""Makes the Unigram tokenizers (XLM-RoBERTa's kind) the Go tokenizer tests
read, reproducibly, from nothing but this script.

No package in the registries the tests use ships an XLM-RoBERTa tokenizer,
so this script makes small ones the way the real ones were made: it writes
a multilingual corpus (generated here from a fixed seed: Latin with
accents, Cyrillic, Greek, Chinese, Japanese, Korean, Arabic, Hebrew,
Devanagari, Thai, emoji, digits, and full-width and compatibility forms,
which NFKC folds), trains sentencepiece Unigram models on it (one thread,
fixed seed, sentencepiece's default nmt_nfkc normalization, whose rules
the model embeds as a precompiled charsmap), and converts each to
tokenizer.json with transformers' own converters:

  xlmr        vocab of 1500, every character of the corpus covered;
              transformers' XLMRobertaConverter (bge-m3, multilingual-e5,
              bge-reranker-v2-m3 and paraphrase-multilingual-* hold what it
              makes): <s> <pad> </s> <unk> first, <mask> last, the
              Precompiled normalizer, a Metaspace pre-tokenizer and
              decoder, the <s> A </s></s> B </s> template
  xlmr-small  vocab of 150 over the Latin and Cyrillic sentences alone, so
              that every other script is unknown; XLMRobertaConverter
  unigram-bytes
              vocab of 1000 with byte_fallback (the <0xXX> pieces);
              transformers' converter for sentencepiece models of no known
              class (SpmConverter.build_tokenizer_from_spm_proto), which
              keeps byte_fallback

Usage: make_unigram.py OUT_DIR

It writes OUT_DIR/NAME/tokenizer.json for each, beside its corpus
(corpus.txt) and sentencepiece model (spm.model), and last
OUT_DIR/index.json, which lists the names.
"""

import json
import os
import random
import sys

# Words by script. The corpus strings them into sentences; the reference
# also reads them back.
WORDS = {
    "latin": ["café", "naïve", "résumé", "über", "Straße", "mañana", "español", "ação", "São", "Paulo",
              "Tiếng", "Việt", "đường", "Łódź", "čeština", "İstanbul", "ğüşıöç", "Ångström", "crème",
              "brûlée", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world",
              "language", "model", "tokenizer", "embedding", "search", "query", "document"],
    "cyrillic": ["Привет", "мир", "как", "дела", "хорошо", "спасибо", "Москва", "язык", "книга", "ёлка",
                 "українська", "мова", "Съешь", "ещё", "этих", "мягких", "булок"],
    "greek": ["Γειά", "σου", "κόσμε", "ελληνικά", "καλημέρα", "ευχαριστώ", "Αθήνα", "ΟΔΥΣΣΕΥΣ",
              "ψυχοφθόρα", "βδελυγμία"],
    "chinese": ["北京是中国的首都", "我喜欢学习语言", "今天天气很好", "你好", "世界", "分词器", "测试"],
    "japanese": ["東京は日本の首都です", "ひらがなとカタカナ", "こんにちは", "漢字", "ありがとう"],
    "korean": ["안녕하세요", "한국어를", "배웁니다", "세계", "감사합니다"],
    "arabic": ["مرحبا", "بالعالم", "اللغة", "العربية", "جميلة", "مَرْحَبًا", "١٢٣٤٥"],
    "hebrew": ["שלום", "עולם", "עברית"],
    "devanagari": ["नमस्ते", "दुनिया", "हिन्दी", "भाषा", "क्षत्रिय"],
    "thai": ["สวัสดีครับ", "ภาษาไทย", "ขอบคุณ"],
    "emoji": ["😀", "👍🏽", "👩\u200d🔬", "❤️", "🇫🇷", "🎉", "✨", "🙂"],
    "compat": ["ＡＢＣ", "ｆｕｌｌ", "ｗｉｄｔｈ", "１２３", "ﬁ", "ﬂ", "①②", "™", "½", "ｶﾀｶﾅ", "㍻", "Ⅻ",
               "ℌ", "㎏", "ǆ", "…", "ﾊﾝｶｸ", "Ｈｅｌｌｏ", "²", "ℹ"],
}

MODELS = [
    # name, the scripts of its corpus (None for all), trainer options,
    # converter
    ("xlmr", None, dict(vocab_size=1500, character_coverage=1.0), "xlmr"),
    ("xlmr-small", ["latin", "cyrillic"], dict(vocab_size=150, character_coverage=0.98), "xlmr"),
    ("unigram-bytes", None, dict(vocab_size=1000, character_coverage=0.9995, byte_fallback=True), "spm"),
]


def corpus(seed=20240601, lines=3000, scripts=None):
    """Sentences of words of one script, now and then mixed with another,
    with numbers."""
    rng = random.Random(seed)
    scripts = sorted(scripts or WORDS)
    out = []
    for _ in range(lines):
        main = rng.choice(scripts)
        words = []
        for _ in range(rng.randint(3, 12)):
            r = rng.random()
            if r < 0.75:
                words.append(rng.choice(WORDS[main]))
            elif r < 0.9:
                words.append(rng.choice(WORDS[rng.choice(scripts)]))
            else:
                words.append(str(rng.randint(0, 10 ** rng.randint(1, 6))))
        out.append(" ".join(words))
    return out


def train(path, prefix, opts):
    import sentencepiece as spm

    spm.set_random_generator_seed(17)
    spm.SentencePieceTrainer.train(
        input=path,
        model_prefix=prefix,
        model_type="unigram",
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        hard_vocab_limit=False,
        minloglevel=2,
        **opts,
    )


class SentencepieceFile:
    """What XLMRobertaConverter reads of a slow XLMRobertaTokenizer: the
    sentencepiece file, add_prefix_space and the ids of <s> and </s> (in
    XLM-R's layout, where <s> <pad> </s> <unk> come first)."""

    add_prefix_space = True

    def __init__(self, vocab_file):
        self.vocab_file = vocab_file

    def convert_tokens_to_ids(self, token):
        return {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}[token]


def convert(model_file, how):
    from transformers.convert_slow_tokenizer import SpmConverter, XLMRobertaConverter, import_protobuf

    if how == "xlmr":
        return XLMRobertaConverter(SentencepieceFile(model_file)).converted()
    proto = import_protobuf().ModelProto()
    with open(model_file, "rb") as f:
        proto.ParseFromString(f.read())
    vocab = [(p.piece, p.score) for p in proto.pieces]
    return SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_unigram.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    from transformers.utils import logging

    logging.set_verbosity_error()
    for name, scripts, opts, how in MODELS:
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        text = os.path.join(d, "corpus.txt")
        with open(text, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(corpus(scripts=scripts)) + "\n")
        train(text, os.path.join(d, "spm"), opts)
        tok = convert(os.path.join(d, "spm.model"), how)
        tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(out, "index.json"), "w", encoding="utf-8") as f:
        json.dump([m[0] for m in MODELS], f)


if __name__ == "__main__":
    main()
