"""Problems found in the user's documents, as data.

A ``Problem`` names the file, the line when known, the document (index and
kind/name), the field path, the bad value and what was expected. The CLI
renders them; nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    message: str
    path: str = ""
    document: int | None = None  # index of the document in its file, from 0
    label: str = ""  # "Fleet city"
    line: int | None = None
    warning: bool = False  # valid, but nothing in the fleet can match it (an error with --strict)
    refers: str = ""  # the kind of document a reference problem depends on (Fleet, Tenant, ...), if one

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [where]
        if self.document is not None:
            doc = f"document {self.document}"
            parts.append(f"{doc} ({self.label})" if self.label else doc)
        if self.path:
            parts.append(self.path)
        return ": ".join(parts) + ": " + self.message


class FieldError(ValueError):
    """A validator's complaint about a field below the one it validates.

    ``loc`` is the path from the validated value to the bad field, in YAML
    names (``("minSize",)``, ``("metadata", "tenant")``); the loader appends it
    to the error's location so the problem points at the field itself.
    """

    def __init__(self, loc: tuple[object, ...], message: str) -> None:
        super().__init__(message)
        self.loc = tuple(loc)


@dataclass
class SpecError(Exception):
    """One or more problems; raised once all of a load's problems are known."""

    problems: list[Problem] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


def format_path(loc: tuple[object, ...]) -> str:
    """('spec', 'sites', 2, 'nodeGroups', 0, 'memory') -> spec.sites[2].nodeGroups[0].memory"""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def folded(problems) -> list[str]:
    """Problems as lines, the ones of one file, field path and message (the
    same component in a thousand applications) on one line: the first, with
    how many more documents have it."""
    groups: dict[tuple, list] = {}
    for p in problems:
        groups.setdefault((p.file, p.path, p.message), []).append(p)
    out = []
    for same in groups.values():
        more = len(same) - 1
        out.append(str(same[0]) + (f" (and the same in {more} more document{'s' if more != 1 else ''})" if more else ""))
    return out
