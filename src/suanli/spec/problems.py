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

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [where]
        if self.document is not None:
            doc = f"document {self.document}"
            parts.append(f"{doc} ({self.label})" if self.label else doc)
        if self.path:
            parts.append(self.path)
        return ": ".join(parts) + ": " + self.message


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
