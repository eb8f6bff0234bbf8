"""The common case of reading a YAML file, straight from libyaml's events.

PyYAML's loaders make a node for every value, resolve each scalar's tag in
Python, then construct the data from the nodes: about 10 µs a value, half a
megabyte a second. A scenario of ten thousand generators is two megabytes.

``documents(text)`` builds the same data as ``yaml.safe_load_all`` from the
parser's events, with one step per event: a plain scalar is resolved once per
distinct spelling (by the SafeLoader's own resolvers and constructors, so a
value reads exactly as there), a quoted one is its text. Whatever needs more
than that is left to the full loader by raising ``Unusual``: anchors, aliases
and explicit tags, merge keys, a key that is not a scalar, a key given twice
(the full loader reports where both are), a number too long to read, a file
that does not parse, values nested deeper than the full loader reads. The
lines of fields are not kept: a problem found later asks for them, and the
file's nodes are composed then (``loader.Source``).
"""

from __future__ import annotations

from typing import Any

import yaml

try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml: the full loader reads everything
    CParser = None

_RESOLVERS = yaml.resolver.Resolver.yaml_implicit_resolvers
_STR = "tag:yaml.org,2002:str"
# the tags the SafeLoader constructs from a plain scalar, and how
_CONSTRUCT = {
    "tag:yaml.org,2002:null": yaml.constructor.SafeConstructor.construct_yaml_null,
    "tag:yaml.org,2002:bool": yaml.constructor.SafeConstructor.construct_yaml_bool,
    "tag:yaml.org,2002:int": yaml.constructor.SafeConstructor.construct_yaml_int,
    "tag:yaml.org,2002:float": yaml.constructor.SafeConstructor.construct_yaml_float,
}
# deeper than this the full loader's composer (recursive) may give up: let it say so
_MAX_DEPTH = 200
_PLAIN: dict[str, Any] = {}  # a plain scalar's spelling -> its value, kept across files
_PLAIN_MAX = 1 << 16


class Unusual(Exception):
    """The text needs the full loader."""


def _plain(value: str) -> Any:
    """A plain scalar's value, as the SafeLoader reads it."""
    for tag, regexp in _RESOLVERS.get(value[:1] if value else "", ()):
        if regexp.match(value):
            break
    else:
        return value
    make = _CONSTRUCT.get(tag)
    if make is None:  # a timestamp, a merge key, '=': the full loader's
        raise Unusual(tag)
    try:
        return make(_CONSTRUCTOR, yaml.ScalarNode(tag, value))
    except ValueError:  # an int of more digits than Python converts
        raise Unusual(tag) from None


_CONSTRUCTOR = yaml.constructor.SafeConstructor()


def documents(text: str) -> tuple[list[Any], list[tuple[int, int]]]:
    """The data of each document in ``text``, in order (None for an empty one),
    and where each starts: (character, line)."""
    if CParser is None:
        raise Unusual("no libyaml")
    get = CParser(text).get_event
    scalar_t, map_t, seq_t = yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent
    map_end, seq_end = yaml.MappingEndEvent, yaml.SequenceEndEvent
    doc_start, doc_end, stream_end = yaml.DocumentStartEvent, yaml.DocumentEndEvent, yaml.StreamEndEvent
    plain, plain_max, no_key, unusual = _PLAIN, _PLAIN_MAX, _NO_KEY, Unusual
    out: list[Any] = []
    starts: list[tuple[int, int]] = []
    # the open collection (``box``: a dict, a list, or the document's root list), the key
    # waiting for its value in a mapping, and the collections around them
    box: Any = []
    key: Any = no_key
    is_map = False
    outer: list[tuple] = []
    try:
        while True:
            e = get()
            t = type(e)
            if t is scalar_t:
                if e.anchor is not None or e.tag is not None:
                    raise unusual("tag or anchor")
                value: Any = e.value
                if e.implicit[0]:  # plain: resolved
                    got = plain.get(value, no_key)
                    if got is no_key:
                        got = _plain(value)
                        if len(plain) < plain_max:
                            plain[value] = got
                    value = got
            elif t is map_t or t is seq_t:
                if e.anchor is not None or e.tag is not None:
                    raise unusual("tag or anchor")
                if len(outer) >= _MAX_DEPTH:
                    raise unusual("deep")
                outer.append((box, key, is_map))
                is_map = t is map_t
                box, key = ({} if is_map else []), no_key
                continue
            elif t is map_end or t is seq_end:
                value = box
                box, key, is_map = outer.pop()
            elif t is doc_start:
                box, key, is_map = [], no_key, False
                mark = e.start_mark
                starts.append((mark.index, mark.line))
                continue
            elif t is doc_end:
                out.append(box[0] if box else None)
                continue
            elif t is stream_end:
                return out, starts
            elif t is yaml.AliasEvent:
                raise unusual("alias")
            else:  # the stream's start
                continue
            if not is_map:
                box.append(value)
            elif key is no_key:
                if type(value) is not str or value == "<<" or value in box:
                    raise unusual("a key that is not a string, a merge or a repeated key")
                key = value
            else:
                box[key] = value
                key = no_key
    except yaml.YAMLError as exc:  # the full loader says where
        raise unusual("malformed") from exc
    except RecursionError as exc:
        raise unusual("deep") from exc


class _NoKey:
    __slots__ = ()


_NO_KEY = _NoKey()
