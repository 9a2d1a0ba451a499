"""Latency of napari_sam3.tokenize (and of SAM3's own tokenizer when sam3 is installed).

Run: python bench/bench_tokenizer.py [--repeat N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from importlib import resources

PROMPTS = {
    "one word": "building",
    "three words": "red solar panel",
    "sentence (20 tokens)": "a large rectangular warehouse with a flat grey roof next to a parking lot",
    "long (truncated)": "a red roof next to a green field " * 10,
    "unicode + entities": "“Straße” &amp; 建筑物 ﬁeld 🛰️",
}
BATCH = ["car", "truck", "ship", "building", "tree", "road", "pool", "field", "tank", "plane"]


def per_call_us(fn: Callable[[], object], repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeat)
    return best * 1e6


def import_seconds() -> float:
    code = "import time; t = time.perf_counter(); import napari_sam3.prompts.tokenizer; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200, help="calls per timing round")
    args = parser.parse_args()
    warnings.simplefilter("ignore", UserWarning)

    print(f"import napari_sam3.prompts.tokenizer: {import_seconds() * 1e3:.0f} ms")
    from napari_sam3.prompts import tokenizer

    t0 = time.perf_counter()
    tokenizer.tokenize("warm up")
    print(
        f"first call (builds the BPE from the vocabulary file): {(time.perf_counter() - t0) * 1e3:.0f} ms"
    )

    official = None
    try:
        from sam3.model.tokenizer_ve import SimpleTokenizer
    except ImportError:
        print("(sam3 not installed: no comparison with the official tokenizer)")
    else:
        vocab = resources.files("napari_sam3").joinpath("data", "bpe_simple_vocab_16e6.txt.gz")
        with resources.as_file(vocab) as path:
            official = SimpleTokenizer(bpe_path=str(path))

    print(f"{'prompt':<28}{'napari_sam3 us':>16}{'sam3 official us':>18}")
    cases = {**PROMPTS, f"batch of {len(BATCH)} keywords": BATCH}
    for name, text in cases.items():
        ours = per_call_us(lambda t=text: tokenizer.tokenize(t), args.repeat)
        ref = ""
        if official is not None:
            ref = f"{per_call_us(lambda t=text: official(t, context_length=32), args.repeat):.1f}"
        print(f"{name:<28}{ours:>16.1f}{ref:>18}")


if __name__ == "__main__":
    main()
