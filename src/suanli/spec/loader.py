"""Read YAML files into validated documents, collecting every problem.

``load_documents(paths)`` reads each file (several documents per file), follows
Scenario ``include``s, validates each document against ``schema.py`` and then
checks cross-document references (``refs.py``). Problems carry file, line,
document and field path; all of them are gathered before ``SpecError`` is raised.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml
from pydantic import BaseModel, ValidationError

from suanli.spec import schema
from suanli.spec.problems import Problem, SpecError, format_path


@dataclass(frozen=True, slots=True)
class Source:
    """Where a document came from, to point at lines when reporting."""

    file: str
    index: int
    label: str
    node: yaml.Node | None
    data: Any


@dataclass(frozen=True, slots=True)
class Loaded:
    doc: Any  # one of schema.*Doc
    src: Source

    @property
    def name(self) -> str:
        return self.doc.metadata.name


@dataclass
class Documents:
    """All validated documents of one load, by kind, in file order."""

    fleets: list[Loaded] = field(default_factory=list)
    tenants: list[Loaded] = field(default_factory=list)
    virtual_clusters: list[Loaded] = field(default_factory=list)
    applications: list[Loaded] = field(default_factory=list)
    scenarios: list[Loaded] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    _BY_KIND = {
        "Fleet": "fleets",
        "Tenant": "tenants",
        "VirtualCluster": "virtual_clusters",
        "Application": "applications",
        "Scenario": "scenarios",
    }

    def add(self, loaded: Loaded) -> None:
        getattr(self, self._BY_KIND[loaded.doc.kind]).append(loaded)

    def all(self) -> Iterable[Loaded]:
        for attr in self._BY_KIND.values():
            yield from getattr(self, attr)


def load_documents(paths: Sequence[str | os.PathLike[str]], *, check_refs: bool = True) -> Documents:
    """Load, validate and cross-check; raise SpecError listing every problem."""
    docs = Documents()
    problems: list[Problem] = []
    seen: set[Path] = set()
    queue: list[tuple[str, Problem | None]] = [(os.fspath(p), None) for p in paths]
    while queue:
        display, origin = queue.pop(0)
        real = Path(display).resolve()
        if real in seen:
            continue
        seen.add(real)
        try:
            text = real.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if origin is not None:
                problems.append(_replace_message(origin, f"cannot read included file {display!r}: {reason}"))
            else:
                problems.append(Problem(display, f"cannot read file: {reason}"))
            continue
        docs.files.append(display)
        for loaded_or_problem in _parse_file(display, text):
            if isinstance(loaded_or_problem, Problem):
                problems.append(loaded_or_problem)
                continue
            docs.add(loaded_or_problem)
            if loaded_or_problem.doc.kind == "Scenario":
                base = os.path.dirname(display)
                for i, inc in enumerate(loaded_or_problem.doc.spec.include):
                    where = problem_at(loaded_or_problem.src, ("spec", "include", i), "")
                    queue.append((os.path.normpath(os.path.join(base, inc)), where))
    if problems:
        raise SpecError(problems)
    if check_refs:
        from suanli.spec.refs import check_references

        problems.extend(check_references(docs))
        if problems:
            raise SpecError(problems)
    return docs


def _replace_message(p: Problem, message: str) -> Problem:
    return Problem(p.file, message, p.path, p.document, p.label, p.line)


# ------------------------------------------------------------------ parsing


def _parse_file(display: str, text: str) -> list[Loaded | Problem]:
    out: list[Loaded | Problem] = []
    loader = yaml.SafeLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            dup = _duplicate_keys(node)
            data = loader.construct_document(node)
            src = Source(display, index, _label(data), node, data)
            index += 1
            if data is None:
                continue
            if dup:
                for loc, key_node in dup:
                    out.append(
                        Problem(
                            display,
                            f"key {key_node.value!r} appears twice in this mapping",
                            format_path(loc),
                            src.index,
                            src.label,
                            key_node.start_mark.line + 1,
                        )
                    )
                continue
            out.extend(_validate(src))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        what = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        msg = f"malformed YAML: {what}" + (f" ({context})" if context else "")
        out.append(Problem(display, msg, "", index, "", line))
    finally:
        loader.dispose()
    return out


def _label(data: Any) -> str:
    if not isinstance(data, dict):
        return ""
    kind = data.get("kind")
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return " ".join(str(x) for x in (kind, name) if x is not None)


def _duplicate_keys(node: yaml.Node, loc: tuple = ()) -> list[tuple[tuple, yaml.Node]]:
    found: list[tuple[tuple, yaml.Node]] = []
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for k, v in node.value:
            key = getattr(k, "value", None)
            if isinstance(key, str):
                if key in keys:
                    found.append((loc + (key,), k))
                keys.add(key)
            found.extend(_duplicate_keys(v, loc + (key,)))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found.extend(_duplicate_keys(item, loc + (i,)))
    return found


def _validate(src: Source) -> list[Loaded | Problem]:
    data = src.data
    if not isinstance(data, dict):
        return [problem_at(src, (), f"a document is a mapping with apiVersion, kind, metadata and spec; got {type(data).__name__}")]
    kind = data.get("kind")
    cls = schema.DOCUMENT_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        known = ", ".join(schema.DOCUMENT_KINDS)
        got = "nothing" if kind is None else repr(kind)
        return [problem_at(src, ("kind",), f"unknown kind {got}; expected one of {known}")]
    try:
        return [Loaded(cls.model_validate(data), src)]
    except ValidationError as exc:
        return [_problem_from_error(src, cls, err) for err in _relevant(exc.errors())]


def _relevant(errors: list[dict]) -> list[dict]:
    """Drop the 'wrong branch' noise of unions when a deeper error explains it."""
    keep = []
    for err in errors:
        loc = err["loc"]
        if err["type"] in ("literal_error", "model_type", "dict_type", "none_required") and any(
            len(o["loc"]) > len(loc) and o["loc"][: len(loc) - 1] == loc[:-1] for o in errors
        ):
            continue
        keep.append(err)
    return keep or errors


def _data_path(data: Any, loc: tuple) -> tuple:
    """Keep only the loc parts that exist in the data (drops union/tag parts)."""
    out: list[Any] = []
    cur = data
    for i, part in enumerate(loc):
        if isinstance(cur, dict) and part in cur:
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
        elif i == len(loc) - 1 and isinstance(part, str) and isinstance(cur, dict):
            out.append(part)  # a missing or extra field: name it
        elif isinstance(cur, (dict, list)):
            continue  # a union branch tag such as 'nodeDown' or 'ResourcesSpec'
        else:
            break
    return tuple(out)


def _line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    if node is None:
        return None
    cur = node
    for part in loc:
        nxt = None
        if isinstance(cur, yaml.MappingNode):
            for k, v in cur.value:
                if getattr(k, "value", None) == part:
                    nxt = v
                    break
        elif isinstance(cur, yaml.SequenceNode) and isinstance(part, int) and part < len(cur.value):
            nxt = cur.value[part]
        if nxt is None:
            break
        cur = nxt
    return cur.start_mark.line + 1


def problem_at(src: Source, loc: tuple, message: str) -> Problem:
    """A problem at a field path of a document; the path is in YAML names."""
    return Problem(src.file, message, format_path(loc), src.index, src.label, _line_of(src.node, loc))


def _value_at(data: Any, loc: tuple) -> Any:
    cur = data
    for part in loc:
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            return None
    return cur


def _problem_from_error(src: Source, cls: type[BaseModel], err: dict) -> Problem:
    loc = _data_path(src.data, tuple(err["loc"]))
    kind, msg = err["type"], err["msg"]
    value = err.get("input")
    if kind == "extra_forbidden":
        known = _fields_at(cls, tuple(err["loc"])[:-1])
        key = loc[-1] if loc else "?"
        hint = difflib.get_close_matches(str(key), known, n=1)
        if hint:
            text = f"unknown field {key!r}; did you mean {hint[0]!r}?"
        else:
            text = f"unknown field {key!r}" + (f"; expected one of: {', '.join(known)}" if known else "")
        return problem_at(src, loc, text)
    if kind == "missing":
        return problem_at(src, loc, "required field is missing")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif msg.startswith("Assertion failed, "):
        msg = msg[len("Assertion failed, ") :]
    elif msg.startswith("Input should be"):
        msg = "expected" + msg[len("Input should be") :]
    else:
        msg = msg[:1].lower() + msg[1:]
    if isinstance(value, (str, int, float, bool)) and repr(value) not in msg:
        msg = f"{msg}; got {value!r}"
    return problem_at(src, loc, msg)


# -------------------------------------------------- known fields, for hints


def _models_in(tp: Any) -> list[type[BaseModel]]:
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    if origin is typing.Annotated:
        return _models_in(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, dict):
        args = typing.get_args(tp)
        if origin is dict:
            args = args[1:]
        return [m for a in args for m in _models_in(a)]
    return []


def _fields_at(cls: type[BaseModel], loc: tuple) -> list[str]:
    current: list[type[BaseModel]] = [cls]
    for part in loc:
        if isinstance(part, int):
            continue
        nxt: list[type[BaseModel]] = []
        for model in current:
            for name, info in model.model_fields.items():
                if part in (info.alias, name):
                    nxt.extend(_models_in(info.annotation))
            if model.__name__ == part:
                nxt.append(model)
        tagged = [m for m in nxt if m.__name__ == part]
        if nxt:
            current = nxt
        elif tagged:
            current = tagged
        else:
            # a discriminator tag such as 'nodeDown': keep the union members that carry it
            current = [
                m
                for m in current
                if "kind" in m.model_fields and typing.get_args(m.model_fields["kind"].annotation) == (part,)
            ] or current
    names: list[str] = []
    for model in current:
        for name, info in model.model_fields.items():
            alias = info.alias or name
            if alias not in names:
                names.append(alias)
    return names
