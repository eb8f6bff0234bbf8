"""Read YAML files into validated documents, collecting every problem.

``load_documents(paths)`` reads each file (several documents per file), follows
Scenario ``include``s, validates each document against ``schema.py`` and then
checks cross-document references (``refs.py``). Problems carry file, line,
document and field path; all of them are gathered before ``SpecError`` is raised.
"""

from __future__ import annotations

import difflib
import functools
import gc
import os
import reprlib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml
from pydantic import BaseModel, ValidationError

from suanli.spec import fastyaml, schema
from suanli.spec.problems import Problem, SpecError, format_path


@dataclass(frozen=True, slots=True)
class Source:
    """Where a document came from, to point at lines when reporting."""

    file: str
    index: int
    label: str
    where: yaml.Node | _FileNodes | None  # its node, or its file's, composed when a line is asked for
    data: Any

    def line(self, loc: tuple) -> int | None:
        """The line of the field at ``loc`` in the file."""
        where = self.where
        if type(where) is _FileNodes:
            node, first = where.node(self.index)
            return _line_of(node, loc, first)
        return _line_of(where, loc)


class _FileNodes:
    """Where the documents of a file read by the fast path start; a document's
    nodes are composed from its own lines the first time a line is wanted."""

    __slots__ = ("text", "starts", "_nodes")

    def __init__(self, text: str, starts: list[tuple[int, int]]) -> None:
        self.text, self.starts = text, starts  # (character, line) where each document starts
        self._nodes: dict[int, yaml.Node | None] = {}

    def node(self, index: int) -> tuple[yaml.Node | None, int]:
        """Document ``index``'s node, and the line of the file its text starts on."""
        if index >= len(self.starts):
            return None, 0
        start, first = self.starts[index]
        if index not in self._nodes:
            end = self.starts[index + 1][0] if index + 1 < len(self.starts) else len(self.text)
            try:
                self._nodes[index] = _compose(self.text[start:end], 0)
            except yaml.YAMLError:  # (directives between documents) the whole file, then
                self._nodes[index], first = _compose(self.text, index), 0
                self.starts[index] = (start, 0)
        return self._nodes[index], first


def _compose(text: str, index: int) -> yaml.Node | None:
    """The node of the ``index``-th document of ``text``."""
    loader = _SafeLoader(text)
    try:
        node = None
        for _ in range(index + 1):
            node = loader.get_node() if loader.check_node() else None
        return node
    finally:
        loader.dispose()


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
    warnings: list[Problem] = field(default_factory=list)  # valid, but nothing in the fleet can match them

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


def load_documents(paths: Sequence[str | os.PathLike[str]], *, check_refs: bool = True,
                   populations: Mapping[str, str] | None = None, strict: bool = False) -> Documents:
    """Load, validate and cross-check; raise SpecError listing every problem.
    Warnings (a demand that nothing in the fleet meets) are kept in
    ``docs.warnings``; with ``strict`` they are problems too.
    ``populations``: NAME -> COUNT as written on a command line (``--population
    cars=1000000``), the size of a population in place of its document's."""
    # a load makes many containers and frees none: the cycle collector would walk them again and again
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load_documents(paths, check_refs, populations, strict)
    finally:
        if collecting:
            gc.enable()


def _load_documents(paths, check_refs: bool, populations, strict: bool) -> Documents:
    docs = Documents()
    problems: list[Problem] = []
    unread = False
    seen: set[Path] = set()
    # each file to read, and for an included one: the scenario and the field that names it, as written
    queue: list[tuple[str, tuple[Source, tuple, str] | None]] = [(os.fspath(p), None) for p in paths]
    while queue:
        display, origin = queue.pop(0)
        try:
            real = Path(display).resolve()
            if real in seen:
                continue
            seen.add(real)
            text = real.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            unread = True  # what it defines is not known: no reference is sure to be missing
            if origin is not None:
                src, loc, written = origin
                looked = "" if display == written else f" (looked for {display!r})"
                problems.append(problem_at(src, loc, f"cannot read included file {written!r}{looked}: {reason}; "
                                                     "include paths are relative to the scenario file"))
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
                    queue.append((os.path.normpath(os.path.join(base, inc)),
                                  (loaded_or_problem.src, ("spec", "include", i), inc)))
    if problems:
        if check_refs:  # the references among the documents that are valid too, all in one report
            from suanli.spec.refs import check_references

            unsure = {"*"} if unread else _unsure(problems)
            problems += [p for p in check_references(docs)
                         if not p.warning and p.refers not in unsure and not (p.refers and "*" in unsure)]
        raise SpecError(_in_file_order(problems, docs.files))
    if populations:
        _resize(docs, populations)
    if check_refs:
        from suanli.spec.refs import check_references

        found = check_references(docs)
        problems.extend(p for p in found if strict or not p.warning)
        docs.warnings = _in_file_order([p for p in found if p.warning and not strict], docs.files)
        if problems:
            raise SpecError(_in_file_order(problems, docs.files))
    return docs


def _unsure(problems: list[Problem]) -> set[str]:
    """The documents that these problems leave out ("Tenant t"; "Fleet" for
    any Fleet document, whose sites are many): a reference to one of them
    may be missing only because it is not valid. An unreadable file, or a
    document whose kind and name are not known, leaves out anything ("*")."""
    out = set()
    for p in problems:
        kind, _, name = p.label.partition(" ")
        if kind not in Documents._BY_KIND or not name:
            return {"*"}
        out.add("Fleet" if kind == "Fleet" else p.label)
    return out


def _in_file_order(problems: list[Problem], files: list[str]) -> list[Problem]:
    """Files in load order, then documents, then lines: a report that reads top to bottom."""
    rank = {f: i for i, f in enumerate(files)}
    return sorted(
        problems,
        key=lambda p: (
            rank.get(p.file, len(rank)),
            -1 if p.document is None else p.document,
            0 if p.line is None else p.line,
        ),
    )


# ------------------------------------------------------------------ parsing

# libyaml's parser when PyYAML was built with it: same nodes and marks, much faster
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def validate_document(display: str, data: Any) -> list[Loaded | Problem]:
    """One document already read (a JSON request body, say), validated as
    ``load_documents`` validates each document of a file; its problems have no lines."""
    try:
        return _validate(Source(display, 0, _label(data), None, data))
    except RecursionError:
        return [Problem(display, "nested too deeply to check; simplify the document", "", 0, "", None)]


def _parse_file(display: str, text: str) -> list[Loaded | Problem]:
    try:
        datas, starts = fastyaml.documents(text)
    except fastyaml.Unusual:
        return _parse_file_fully(display, text)
    out: list[Loaded | Problem] = []
    nodes = _FileNodes(text, starts)
    for index, data in enumerate(datas):
        if data is None:
            continue
        src = Source(display, index, _label(data), nodes, data)
        try:
            out.extend(_validate(src))
        except RecursionError:
            out.append(problem_at(src, (), "nested too deeply to check; simplify the document"))
    return out


def _parse_file_fully(display: str, text: str) -> list[Loaded | Problem]:
    """The full loader's reading: every node with its marks, repeated keys, tags, anchors."""
    out: list[Loaded | Problem] = []
    loader = _SafeLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            dup = _duplicate_keys(node)
            try:
                data = loader.construct_document(node)
            except ValueError:  # an int of more digits than Python converts
                _reset_constructor(loader)
                out.append(_long_number_problem(display, index, node))
                index += 1
                continue
            src = Source(display, index, _label(data), node, data)
            index += 1
            if data is None:
                continue
            for loc, key_node, first in dup:
                out.append(
                    Problem(
                        display,
                        f"key {key_node.value!r} appears twice in this mapping (first on line "
                        f"{first.start_mark.line + 1}); keep one",
                        format_path(loc),
                        src.index,
                        src.label,
                        key_node.start_mark.line + 1,
                    )
                )
            try:
                out.extend(_validate(src))
            except RecursionError:
                out.append(problem_at(src, (), "nested too deeply to check; simplify the document"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        what = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        msg = f"malformed YAML: {what}" + (f" ({context})" if context else "")
        out.append(Problem(display, msg, "", index, "", line))
    except RecursionError:
        mark = loader.get_mark() if hasattr(loader, "get_mark") else None
        line = mark.line + 1 if mark is not None else None
        out.append(Problem(display, "malformed YAML: nested too deeply to read", "", index, "", line))
    finally:
        loader.dispose()
    return out


def _reset_constructor(loader: Any) -> None:
    """Forget a document whose construction failed half-way, so the next one starts clean."""
    loader.constructed_objects = {}
    loader.recursive_objects = {}
    loader.state_generators = []


_INT_TAG = "tag:yaml.org,2002:int"


def _long_number_problem(display: str, index: int, node: yaml.Node) -> Problem:
    """The problem for a document holding a whole number too long to read: at
    that number's field, with the document's kind and name when they are plain."""
    stack: list[tuple[yaml.Node, tuple]] = [(node, ())]
    visited: set[int] = set()
    while stack:
        cur, where = stack.pop()
        if id(cur) in visited:
            continue
        visited.add(id(cur))
        if isinstance(cur, yaml.ScalarNode) and cur.tag == _INT_TAG and len(cur.value) > 4000:
            digits = sum(ch.isdigit() for ch in cur.value)
            return Problem(display, f"a whole number of {digits} digits is above every limit",
                           format_path(where), index, _node_label(node), cur.start_mark.line + 1)
        if isinstance(cur, yaml.MappingNode):
            stack.extend((v, where + (getattr(k, "value", "?"),)) for k, v in reversed(cur.value))
        elif isinstance(cur, yaml.SequenceNode):
            stack.extend((v, where + (i,)) for i, v in reversed(list(enumerate(cur.value))))
    return Problem(display, "a number too long to read", "", index, _node_label(node), node.start_mark.line + 1)


def _node_label(node: yaml.Node) -> str:
    """'KIND NAME' read from the nodes of a document that could not be constructed."""
    def scalar(mapping: yaml.Node, key: str) -> yaml.Node | None:
        if isinstance(mapping, yaml.MappingNode):
            for k, v in mapping.value:
                if getattr(k, "value", None) == key:
                    return v
        return None

    parts = [scalar(node, "kind"), scalar(scalar(node, "metadata"), "name")]
    return " ".join(_short(p.value) if not isinstance(p.value, str) else p.value[:128]
                    for p in parts if isinstance(p, yaml.ScalarNode))


def _label(data: Any) -> str:
    if not isinstance(data, dict):
        return ""
    kind = data.get("kind")
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return " ".join(x if isinstance(x, str) else _short(x) for x in (kind, name) if x is not None)


def _duplicate_keys(node: yaml.Node, loc: tuple = ()) -> list[tuple[tuple, yaml.Node, yaml.Node]]:
    """(path, repeated key node, first key node) for each key given twice in one mapping."""
    found: list[tuple[tuple, yaml.Node, yaml.Node]] = []
    stack: list[tuple[yaml.Node, tuple]] = [(node, loc)]
    visited: set[int] = set()  # aliases may share (or recurse into) a node
    while stack:
        cur, where = stack.pop()
        if id(cur) in visited:
            continue
        visited.add(id(cur))
        if isinstance(cur, yaml.MappingNode):
            first: dict[str, yaml.Node] = {}
            for k, v in cur.value:
                key = getattr(k, "value", None)
                if isinstance(key, str):
                    if key in first and key != "<<":
                        found.append((where + (key,), k, first[key]))
                    first.setdefault(key, k)
                stack.append((v, where + (key,)))
        elif isinstance(cur, yaml.SequenceNode):
            for i, item in enumerate(cur.value):
                stack.append((item, where + (i,)))
    found.sort(key=lambda f: (f[1].start_mark.line, f[1].start_mark.column))
    return found


@functools.lru_cache(maxsize=256)
def _dir_of(file: str) -> str | None:
    """The folder of a document's file, where paths written in it start (None: not a file)."""
    return os.path.dirname(os.path.abspath(file)) if file and os.path.isfile(file) else None


def _validate(src: Source) -> list[Loaded | Problem]:
    data = src.data
    if not isinstance(data, dict):
        return [
            problem_at(
                src,
                (),
                "a document is a mapping with apiVersion, kind, metadata and spec; "
                f"got {_kind_of(data)} {_short(data)}",
            )
        ]
    kind = data.get("kind")
    cls = schema.DOCUMENT_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        known = ", ".join(schema.DOCUMENT_KINDS)
        if kind is None:
            return [problem_at(src, ("kind",), f"required field is missing; expected one of {known}")]
        hint = difflib.get_close_matches(kind, list(schema.DOCUMENT_KINDS), n=1) if isinstance(kind, str) else []
        guess = f"did you mean {hint[0]!r}? " if hint else ""
        return [problem_at(src, ("kind",), f"unknown kind {_short(kind)}; {guess}expected one of {known}")]
    try:
        here = _dir_of(src.file)
        return [Loaded(cls.model_validate(data, context={"dir": here} if here else None), src)]
    except ValidationError as exc:
        found = [_problem_from_error(src, cls, err) for err in _relevant(src.data, exc.errors())]
        # in the order of the file, so the messages read top to bottom
        return sorted(found, key=lambda p: p.line if p.line is not None else 0)


_BRANCH_NOISE = ("literal_error", "model_type", "model_attributes_type", "dict_type", "none_required")


def _relevant(data: Any, errors: list[dict]) -> list[dict]:
    """Drop the 'wrong branch' noise of unions when another branch's deeper error explains it.

    A branch error's location ends in a union tag (a part that is not in the
    data); a plain field's error is always kept, whatever its siblings say.
    """
    keep = []
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] in _BRANCH_NOISE and loc and _is_branch_tag(data, loc) and any(
            len(o["loc"]) > len(loc) and tuple(o["loc"][: len(loc) - 1]) == loc[:-1]
            for o in errors
        ):
            continue
        keep.append(err)
    return keep or errors


def _is_branch_tag(data: Any, loc: tuple) -> bool:
    """Whether the last part of ``loc`` names a union branch rather than a field or item."""
    parent = data
    for part in _data_path(data, loc[:-1], ""):
        parent = _dict_get(parent, part) if isinstance(parent, dict) else parent[part]
    last = loc[-1]
    if isinstance(parent, dict):
        return not _dict_has(parent, last)
    if isinstance(parent, list):
        return not isinstance(last, int)
    return isinstance(last, str)


def _dict_has(d: dict, key: Any) -> bool:
    return key in d or any(str(k) == key for k in d)


def _dict_get(d: dict, key: Any) -> Any:
    if key in d:
        return d[key]
    return next(v for k, v in d.items() if str(k) == key)


def _data_path(data: Any, loc: tuple, err_type: str) -> tuple:
    """Keep only the loc parts that exist in the data (drops union/tag parts).

    Mapping keys are given as text, so a key YAML read as a number still
    names its line. A missing or unknown field is named although the data
    lacks it (missing) or the model does (unknown).
    """
    out: list[Any] = []
    cur = data
    for i, part in enumerate(loc):
        if isinstance(cur, dict) and _dict_has(cur, part):
            cur = _dict_get(cur, part)
            out.append(str(part))
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
        elif i == len(loc) - 1 and err_type in ("missing", "extra_forbidden") and isinstance(cur, dict):
            out.append(str(part))  # a missing or extra field: name it
        elif isinstance(cur, (dict, list)):
            continue  # a union branch tag such as 'nodeDown' or 'ResourcesSpec'
        else:
            break
    return tuple(out)


def _line_of(node: yaml.Node | None, loc: tuple, first: int = 0) -> int | None:
    """The line of the field at ``loc``: its key's line (a block value starts below it).
    ``first``: the line of the file that the node's text starts on."""
    if node is None:
        return None
    cur, mark = node, node.start_mark
    for part in loc:
        nxt = None
        if isinstance(cur, yaml.MappingNode):
            for k, v in cur.value:
                if getattr(k, "value", None) == str(part):
                    nxt, mark = v, k.start_mark
                    break
        elif isinstance(cur, yaml.SequenceNode) and isinstance(part, int) and part < len(cur.value):
            nxt = cur.value[part]
            mark = nxt.start_mark
        if nxt is None:
            break
        cur = nxt
    return first + mark.line + 1


def problem_at(src: Source, loc: tuple, message: str) -> Problem:
    """A problem at a field path of a document; the path is in YAML names."""
    return Problem(src.file, message, format_path(loc), src.index, src.label, src.line(loc))


def _kind_of(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


_REPR = reprlib.Repr()  # bounded: a value may be huge or nested thousands deep
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 2


def _short(value: Any) -> str:
    return "" if value is None else _REPR.repr(value)


_MAPPING = "a mapping of fields (key: value)"


def _expected(err: dict) -> str | None:
    """What a built-in pydantic check expected, in the user's words (None: keep pydantic's)."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in ("int_type", "int_parsing", "int_from_float", "int_parsing_size"):
        return "expected a whole number"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return "expected a number"
    if kind in ("bool_type", "bool_parsing"):
        return "expected true or false"
    if kind in ("string_type", "string_unicode"):
        return "expected text"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected {_MAPPING}"
    if kind in ("list_type", "tuple_type", "set_type"):
        return "expected a list"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") in (schema.NAME_PATTERN, schema.SITE_REF_PATTERN):
        tail = " (or {site} in an application with `each`)" if ctx.get("pattern") == schema.SITE_REF_PATTERN else ""
        return (
            "expected a name of letters, digits, '.', '_' and '-' that starts and ends "
            f"with a letter or digit{tail}"
        )
    if kind == "string_too_long":
        return f"expected at most {ctx.get('max_length')} characters"
    if kind == "too_short":
        n = ctx.get("min_length")
        return f"expected at least {n} item{'s' if n != 1 else ''}, got {ctx.get('actual_length')}"
    if kind == "too_long":
        n = ctx.get("max_length")
        return f"expected at most {n} item{'s' if n != 1 else ''}, got {ctx.get('actual_length')}"
    bounds = {
        "greater_than": ("gt", ">"),
        "greater_than_equal": ("ge", ">="),
        "less_than": ("lt", "<"),
        "less_than_equal": ("le", "<="),
    }
    if kind in bounds:
        key, op = bounds[kind]
        return f"expected a number {op} {ctx.get(key)}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected')}"
    if kind == "invalid_key":
        return "expected a field name (text)"
    return None


def _problem_from_error(src: Source, cls: type[BaseModel], err: dict) -> Problem:
    kind, msg = err["type"], err["msg"]
    raw_loc = tuple(err["loc"])
    value = err.get("input")
    ctx = err.get("ctx") or {}
    sub = getattr(ctx.get("error"), "loc", None)
    if sub is not None:  # FieldError: the validator points below its own field
        raw_loc += tuple(sub)
        kind = "missing" if str(ctx["error"]).startswith("required field is missing") else kind
    loc = _data_path(src.data, raw_loc, kind)
    if kind == "extra_forbidden":
        known = _fields_at(cls, raw_loc[:-1])
        key = loc[-1] if loc else "?"
        hint = difflib.get_close_matches(str(key), known, n=1)
        if hint:
            text = f"unknown field {key!r}; did you mean {hint[0]!r}?"
        else:
            text = f"unknown field {key!r}" + (f"; expected one of: {', '.join(known)}" if known else "")
        return problem_at(src, loc, text)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        field = str(ctx.get("discriminator", "kind")).strip("'\"")
        tags = ctx.get("expected_tags") or _union_tags(cls, raw_loc, field)
        if kind == "union_tag_not_found":
            return problem_at(src, loc + (field,), f"required field is missing; expected one of {tags}")
        return problem_at(src, loc + (field,), f"unknown {field} {_short(ctx.get('tag'))}; expected one of {tags}")
    if kind == "missing" and sub is None:
        return problem_at(src, loc, "required field is missing")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif msg.startswith("Assertion failed, "):
        msg = msg[len("Assertion failed, ") :]
    elif _expected(err) is not None:
        msg = _expected(err)
        if kind not in ("too_short", "too_long"):
            msg += f"; got {_kind_of(value) if value is None else _short(value)}"
        return problem_at(src, loc, msg)
    elif msg.startswith("Input should be"):
        msg = "expected" + msg[len("Input should be") :]
    else:
        msg = msg[:1].lower() + msg[1:]
    if isinstance(value, (str, int, float, bool)) and _short(value) not in msg:
        msg = f"{msg}; got {_short(value)}"
    return problem_at(src, loc, msg)


def _union_tags(cls: type[BaseModel], loc: tuple, field: str) -> str:
    """The tags a discriminated union at ``loc`` accepts, for the hint."""
    tags: list[str] = []
    for model in _models_at(cls, loc):
        info = model.model_fields.get(field)
        if info is not None:
            tags.extend(str(a) for a in typing.get_args(info.annotation))
    return ", ".join(repr(t) for t in tags) or "(see the documentation)"


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
    """The YAML field names the model(s) at ``loc`` accept."""
    names: list[str] = []
    for model in _models_at(cls, loc):
        for name, info in model.model_fields.items():
            alias = info.alias or name
            if alias not in names:
                names.append(alias)
    return names


def _models_at(cls: type[BaseModel], loc: tuple) -> list[type[BaseModel]]:
    """The model(s) that validate the value at a pydantic error location."""
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
    return current


def _resize(docs: Documents, counts: Mapping[str, str]) -> None:
    """Each named population with its count from the command line, checked as
    the document's field is (the option is named in the message)."""
    from suanli.model import quantities as q
    from suanli.model.sites import NamePattern

    found = {p.name: (i, j) for i, fl in enumerate(docs.fleets) for j, p in enumerate(fl.doc.spec.populations)}
    problems = []
    for name, raw in counts.items():
        where = f"--population {name}={raw}"
        if name not in found:
            known = ", ".join(sorted(found)) or "none"
            problems.append(Problem(where, f"no population named {name!r}; known: {known}"))
            continue
        try:
            count = int(raw)
            if count < 1:
                raise ValueError
            q.POPULATION.check(count)
        except q.LimitError as exc:
            problems.append(Problem(where, str(exc)))
            continue
        except ValueError:
            problems.append(Problem(where, f"{raw!r} is not a count of sites (an integer >= 1)"))
            continue
        i, j = found[name]
        fl = docs.fleets[i]
        pop = fl.doc.spec.populations[j]
        width = NamePattern.parse(pop.sites).width
        if len(str(count - 1)) > width:
            problems.append(Problem(where, f"the pattern {pop.sites!r} has {width} '#' for the index, too few "
                                           f"for {count} sites"))
            continue
        pops = list(fl.doc.spec.populations)
        pops[j] = pop.model_copy(update={"count": count})
        spec = fl.doc.spec.model_copy(update={"populations": pops})
        docs.fleets[i] = Loaded(fl.doc.model_copy(update={"spec": spec}), fl.src)
    if problems:
        raise SpecError(problems)
