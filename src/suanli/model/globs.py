"""Shell-style globs over names ('cloud-*', 'edge-?')."""

from __future__ import annotations

import re


def glob_regex(pattern: str) -> str:
    """A glob as an anchored-by-fullmatch regex."""
    return "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)


def glob_match(pattern: str, name: str) -> bool:
    return re.fullmatch(glob_regex(pattern), name) is not None
