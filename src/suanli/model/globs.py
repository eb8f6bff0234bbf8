"""Shell-style globs over names ('cloud-*', 'edge-?')."""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> str:
    """A glob as an anchored-by-fullmatch regex."""
    return "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(glob_regex(pattern))


def glob_match(pattern: str, name: str) -> bool:
    return _compiled(pattern).fullmatch(name) is not None
