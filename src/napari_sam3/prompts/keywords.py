"""Typed keyword lists -> the keywords sent to the model: one rule for widgets and the command line.

Text such as ``"building, road; tree"`` or one keyword per line is split on commas, semicolons
and newlines; each keyword is stripped and empty ones are dropped. Repeats are dropped keeping
the first spelling and the order: the comparison ignores case and runs of whitespace, because
the tokenizer lower-cases and folds whitespace, so ``"Building"`` and ``"building"`` are the same
query and would only return the same objects twice.
"""

from __future__ import annotations

import re

from napari_sam3.core.errors import InvalidType

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
