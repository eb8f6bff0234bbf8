"""Reading a request body into one document, with bounds a hostile client cannot pass.

A body is at most ``--max-body`` bytes when it arrives, but what it decodes
to could still be far larger or deeper:

- YAML aliases: one anchor referenced a thousand times makes a document a
  thousand times the body. Request bodies may use neither anchors nor
  aliases (a file on disk may; a request is one document, written out).
- Nesting: a few kilobytes of ``[[[[...`` reach the interpreter's recursion
  limit. Bodies nest at most ``MAX_DEPTH`` levels.
- Size: at most ``MAX_NODES`` values (mappings, lists and scalars) in all.
- Keys given twice in one mapping are refused, as the file loader refuses
  them, instead of the last silently winning.

Each refusal is a ``BodyError`` with the field path where it was found and
the status it answers (400: not a readable document; 422: readable, not
acceptable).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

MAX_DEPTH = 32  # an Application document nests about 8 levels
MAX_NODES = 100_000  # values in one body


class BodyError(Exception):
    def __init__(self, status: int, message: str, path: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.path = status, message, path


def _path(loc: list) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_json(text: str) -> Any:
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs)
    except _Duplicate as dup:
        raise BodyError(422, f"key {dup.key!r} appears twice in one object; keep one", "") from None
    except RecursionError:
        raise BodyError(422, f"the body nests more than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # also numbers of more digits than the interpreter converts
        raise BodyError(400, f"the body is not a readable document: {exc}") from None
    check_shape(data)
    return data


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that refuses anchors and aliases, deep nesting and repeated keys."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise BodyError(422, f"YAML aliases (*{event.anchor}) are not accepted in request bodies; "
                            f"write the value out (line {event.start_mark.line + 1})")
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise BodyError(422, f"YAML anchors (&{anchor}) are not accepted in request bodies "
                            f"(line {event.start_mark.line + 1})")
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise BodyError(422, f"the body nests more than {MAX_DEPTH} levels "
                                f"(line {event.start_mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = getattr(key_node, "value", None)
            if isinstance(key, str) and key in seen:
                raise BodyError(422, f"key {key!r} appears twice in one mapping (line "
                                f"{key_node.start_mark.line + 1}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(text: str) -> Any:
    loader = _StrictLoader(text)
    try:
        data = loader.get_single_data()
    except BodyError:
        raise
    except yaml.YAMLError as exc:
        raise BodyError(400, f"the body is not a readable document: {exc}") from None
    except RecursionError:
        raise BodyError(422, f"the body nests more than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()
    check_shape(data)
    return data


def check_shape(data: Any) -> None:
    """At most ``MAX_DEPTH`` levels and ``MAX_NODES`` values (walked without recursion)."""
    stack: list[tuple[Any, int, list]] = [(data, 1, [])]
    nodes = 0
    while stack:
        value, depth, loc = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise BodyError(422, f"the body holds more than {MAX_NODES} values")
        if depth > MAX_DEPTH:
            raise BodyError(422, f"the body nests more than {MAX_DEPTH} levels", _path(loc))
        if isinstance(value, dict):
            stack.extend((v, depth + 1, loc + [k]) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, loc + [i]) for i, v in enumerate(value))


def read_body(raw: bytes, content_type: str) -> Any:
    """The document in a request body: YAML when the content type says so, else JSON."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(400, f"the body is not UTF-8 text: {exc}") from None
    return read_yaml(text) if "yaml" in content_type else read_json(text)
