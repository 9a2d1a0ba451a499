"""Client-side text tokenizer: SAM3's CLIP BPE, without torch.

`tokenize` turns a prompt (or several) into the int64 ``[N, 32]`` token ids the text encoder graph
takes. The ids are identical to SAM3's own tokenizer: the same text clean-up (ftfy, HTML
unescaping, whitespace folding, lower-casing), the same CLIP split pattern, then byte-level BPE
over the vocabulary shipped in ``napari_sam3/data`` with HF ``tokenizers``.

The split pattern runs on the ``regex`` package rather than inside ``tokenizers``: the Oniguruma
engine in ``tokenizers`` has an older Unicode table (17,480 code points that are letters for
``regex`` are not for it) and case-folds U+0345 into ``\\p{L}``, so its split differed from SAM3's
on such text. ``regex`` is the engine SAM3's tokenizer itself uses.
"""

from __future__ import annotations

import functools
import gzip
import html
import warnings
from collections.abc import Sequence
from importlib import resources

import ftfy
import numpy as np
import regex
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

from napari_sam3.core.errors import InvalidInput, InvalidType, RunFailed

__all__ = [
    "CONTEXT_LENGTH",
    "EOT_ID",
    "PAD_ID",
    "SOT_ID",
    "VOCAB_SIZE",
    "clean_text",
    "tokenize",
]

CONTEXT_LENGTH = 32
SOT_TOKEN = "<start_of_text>"
EOT_TOKEN = "<end_of_text>"
SOT_ID = 49406
EOT_ID = 49407
PAD_ID = 0
VOCAB_SIZE = 49408

_VOCAB_FILE = "bpe_simple_vocab_16e6.txt.gz"
# The vocabulary file holds more merges than CLIP uses: a header line, then 49152 - 256 - 2 merges.
_N_MERGES = 49152 - 256 - 2

# SAM3 matches case-insensitively; after lower-casing this still matters for e.g. "'ſ" (long s).
_SPLIT = regex.compile(
    "|".join(regex.escape(t) for t in (SOT_TOKEN, EOT_TOKEN))
    + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
    regex.IGNORECASE,
)
_WHITESPACE = regex.compile(r"\s+")


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP table mapping each byte to a printable character (BPE symbols are bytes)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@functools.lru_cache(maxsize=1)
def _bpe_tokenizer() -> Tokenizer:
    """Build (once) the byte-level BPE tokenizer from the shipped vocabulary file."""
    raw = resources.files("napari_sam3").joinpath("data", _VOCAB_FILE).read_bytes()
    lines = gzip.decompress(raw).decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : _N_MERGES + 1]]

    symbols = list(_byte_to_unicode().values())
    tokens = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    tokens += [SOT_TOKEN, EOT_TOKEN]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != VOCAB_SIZE or vocab[SOT_TOKEN] != SOT_ID or vocab[EOT_TOKEN] != EOT_ID:
        raise RunFailed(f"{_VOCAB_FILE} is not the CLIP BPE vocabulary SAM3 uses")

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, end_of_word_suffix="</w>"))
    # Words arrive already split by _SPLIT; only the byte-to-symbol mapping is left to do.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    # A split word equal to a marker becomes its single id, as in SAM3. (A word can only contain
    # a marker by being one: a punctuation run stops at letters.)
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in (SOT_TOKEN, EOT_TOKEN)]
    )
    return tok


def clean_text(text: str) -> str:
    """SAM3's clean-up: fix mojibake and unescape HTML, fold whitespace, lower-case."""
    text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return _WHITESPACE.sub(" ", text).strip().lower()


def _encode(text: str) -> list[int]:
    # ftfy has already turned lone surrogates into U+FFFD, so every word encodes as UTF-8.
    cleaned = clean_text(text)
    words = _SPLIT.findall(cleaned)
    if not words:
        return []
    return _bpe_tokenizer().encode(words, is_pretokenized=True, add_special_tokens=False).ids


def _as_texts(text: object) -> list[str]:
    if isinstance(text, str):
        return [text]
    if isinstance(text, bytes | bytearray | memoryview):
        raise InvalidType(
            f"tokenize() takes str or a sequence of str, got {type(text).__name__}; decode it first"
        )
    if isinstance(text, np.ndarray):
        if text.ndim != 1:
            raise InvalidType(f"tokenize() takes a 1-D array of str, got a {text.ndim}-D array")
        text = text.tolist()
    if not isinstance(text, Sequence):
        raise InvalidType(f"tokenize() takes str or a sequence of str, got {type(text).__name__}")
    texts = list(text)
    for i, item in enumerate(texts):
        if not isinstance(item, str):
            raise InvalidType(f"tokenize() takes str items, but item {i} is {type(item).__name__}")
    return texts


def tokenize(text: str | Sequence[str], context_length: int = CONTEXT_LENGTH) -> np.ndarray:
    """Token ids for SAM3's text encoder, identical to SAM3's own tokenizer.

    Args:
        text: one prompt, or a sequence of prompts (e.g. several keywords at once).
        context_length: ids per prompt; SAM3's text encoder takes 32.

    Returns:
        int64 array ``[1, context_length]`` for a string, ``[N, context_length]`` for N strings:
        start-of-text (49406), the BPE ids, end-of-text (49407), then zeros. A prompt that does not
        fit is cut to ``context_length`` ids with end-of-text kept last, and a warning is issued.

    Raises:
        TypeError: ``text`` is not a str or a sequence of str, or ``context_length`` not an int.
        ValueError: ``context_length`` < 2.
    """
    if isinstance(context_length, bool) or not isinstance(context_length, int | np.integer):
        raise InvalidType(f"context_length must be an int, got {type(context_length).__name__}")
    context_length = int(context_length)
    if context_length < 2:
        raise InvalidInput(
            f"context_length must be at least 2 (start and end), got {context_length}"
        )

    texts = _as_texts(text)
    out = np.full((len(texts), context_length), PAD_ID, dtype=np.int64)
    for row, prompt in enumerate(texts):
        ids = [SOT_ID, *_encode(prompt), EOT_ID]
        if len(ids) > context_length:
            shown = prompt if len(prompt) <= 60 else prompt[:57] + "..."
            warnings.warn(
                f"prompt {shown!r} is {len(ids)} tokens long; truncated to {context_length} tokens"
                " (end-of-text kept last)",
                UserWarning,
                stacklevel=2,
            )
            ids = ids[: context_length - 1] + [EOT_ID]
        out[row, : len(ids)] = ids
    return out
