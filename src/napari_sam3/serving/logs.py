"""Reading Triton's log and errors: the lines that say why."""

from __future__ import annotations

import os
import re

_LOG_ERROR = re.compile(r'^E\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] "?(.*?)"?$')


def log_errors(path: str | os.PathLike, limit: int = 6) -> list[str]:
    """The last error lines Triton wrote to its log, without their prefixes."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - 256 * 1024))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    errors = []
    for line in lines:
        match = _LOG_ERROR.match(line)
        if match and match.group(1) not in errors:
            errors.append(match.group(1).split("\\n")[0])
    return errors[-limit:]


def _reason(text: str) -> str:
    # Triton appends the Python traceback ("\n\nAt:\n  file(line)...") to a stub's error.
    return text.split("\n\nAt:")[0].strip().replace("\n", " ") or "no reason given"
