"""The argument parser of the project's commands (napari-sam3, sam3-serve, sam3-export).

argparse takes a value that starts with '-' for an option unless it is a plain number, so
`--bbox -57.3,-25.1,-57.0,-24.9` (west of Greenwich and south of the equator) failed with
"expected one argument" and only `--bbox=-57.3,...` worked. No option of these commands looks
like a number, so here every word that starts with a minus and a digit (or a minus, a dot and a
digit) is a value: coordinate lists, negative numbers, ranges.
"""

from __future__ import annotations

import argparse
import re

VALUE_WITH_MINUS = re.compile(r"^-\.?\d")


class ArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # argparse's own rule (an instance attribute, the same name since Python 3.2) widened:
        # its sub-commands are made by this class too, so they share it
        self._negative_number_matcher = VALUE_WITH_MINUS
