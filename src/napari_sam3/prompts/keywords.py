"""Typed keyword lists -> the keywords sent to the model: one rule for widgets and the command line.

Text such as ``"building, road; tree"`` or one keyword per line is split on commas, semicolons
and newlines; each keyword is stripped and empty ones are dropped. Repeats are dropped keeping
the first spelling and the order: the comparison ignores case and runs of whitespace, because
the tokenizer lower-cases and folds whitespace, so ``"Building"`` and ``"building"`` are the same
query and would only return the same objects twice.
"""

from __future__ import annotations

import re
import unicodedata

from napari_sam3.core.errors import InvalidInput, InvalidType

_SEPARATORS = re.compile(r"[,;\r\n]+")


def parse_keywords(text: str | None) -> list[str]:
    """``"building, Road;\\nroad"`` -> ``["building", "Road"]``; ``""`` or None -> ``[]``."""
    if text is None:
        return []
    if not isinstance(text, str):
        raise InvalidType(
            f"keywords must be text such as 'building, road', got {type(text).__name__}"
        )
    kept: dict[str, str] = {}
    for word in _SEPARATORS.split(text):
        word = word.strip()
        if word:
            kept.setdefault(" ".join(word.lower().split()), word)
    return list(kept.values())


# What the model cannot read: controls, format characters (zero-width, direction marks),
# surrogates, private-use and unassigned code points, and whitespace of any script.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})
# A Shapefile's text field holds 254 bytes, the narrowest of the output formats; the model reads
# only a prompt's first 30 tokens in any case.
MAX_KEYWORD_BYTES = 254
EMPTY_KEYWORD = "every keyword must be a non-empty string such as 'building', got {word!r}"


def visible_text(word: str) -> str:
    """What the model reads of ``word``: the tokenizer's clean-up, less what cannot be seen."""
    from napari_sam3.prompts.tokenizer import clean_text

    return "".join(c for c in clean_text(word) if unicodedata.category(c) not in _INVISIBLE)


def check_keyword(word: object) -> str:
    """``word`` as a keyword (runs of whitespace of any script made one space), or the error
    that says why it cannot be one: not text, nothing the model can read (control, zero-width
    or format characters, whitespace), not writable as UTF-8, a control character inside, or
    too long for every output format."""
    if not isinstance(word, str):
        raise InvalidInput(EMPTY_KEYWORD.format(word=word))
    try:
        size = len(word.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise InvalidInput(
            f"keyword {word!r} cannot be written as UTF-8 (character {error.start + 1} is the "
            f"lone surrogate U+{ord(word[error.start]):04X}): retype it"
        ) from None
    folded = " ".join(word.split())
    if not visible_text(folded):
        raise InvalidInput(EMPTY_KEYWORD.format(word=word))
    word = folded
    control = next((c for c in word if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        raise InvalidInput(
            f"keyword {word!r} holds the control character U+{ord(control):04X}: retype it"
        )
    if size > MAX_KEYWORD_BYTES:
        raise InvalidInput(
            f"keyword {word[:40]!r}... is {size} bytes as UTF-8; at most {MAX_KEYWORD_BYTES} (a "
            "Shapefile's text field), and the model reads only its first 30 tokens"
        )
    return word
