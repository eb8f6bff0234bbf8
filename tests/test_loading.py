"""Reading YAML by the fast path (``spec/fastyaml.py``): the same data as the
full loader, or a clear hand-over to it, on random documents; and the same
problems, lines included, on documents that are wrong."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suanli.spec import fastyaml
from suanli.spec.loader import _parse_file, _parse_file_fully
from suanli.spec.problems import Problem

# spellings a plain scalar may resolve to something other than a string
TRICKY = ["yes", "No", "on", "OFF", "true", "False", "~", "null", "NULL", "", "0", "017", "0x1F", "0o17",
          "0b101", "1_000", "-12", "+3", "1:30", "190:20:30", "1.5", "-.inf", ".NaN", "6.8523015e+5", "1e3",
          "2001-12-14", "2001-12-14t21:59:43.10-05:00", "<<", "=", "10m", "500m", "8Gi", "1/330s",
          "phone-00001", "a: b", "- x", "#c", "[x]", "{y}", "'q'", '"d"', "multi\nline", " lead", "trail ",
          "9" * 4400]
scalars = st.one_of(st.sampled_from(TRICKY), st.integers(), st.floats(allow_nan=False), st.booleans(),
                    st.none(), st.text(max_size=12))
keys = st.one_of(st.sampled_from(["name", "kind", "spec", "on", "yes", "1", "<<", "a b", ""]),
                 st.text(min_size=1, max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=20)


def _full(text: str):
    return list(yaml.load_all(text, Loader=yaml.CSafeLoader))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(values, min_size=1, max_size=3), flow=st.sampled_from([None, True, False]),
       style=st.sampled_from([None, "'", '"']), tweak=st.sampled_from(["", "", "", "", "plain", "dup", "anchor", "tag"]))
def test_the_fast_path_reads_what_the_full_loader_reads_or_hands_the_text_over(docs, flow, style, tweak):
    text = yaml.safe_dump_all(docs, default_flow_style=flow, default_style=style, sort_keys=False)
    if tweak == "plain":  # quoted spellings written plain, where the resolvers decide
        text = text.replace("'", "").replace('"', "")
    elif tweak == "dup":
        text += "---\nname: a\nname: b\n"
    elif tweak == "anchor":
        text += "---\na: &x 1\nb: *x\n"
    elif tweak == "tag":
        text += "---\na: !!str 1\n"
    try:
        want = _full(text)
    except (yaml.YAMLError, ValueError):
        want = None
    try:
        got, _ = fastyaml.documents(text)
    except fastyaml.Unusual:
        _stats["over"] += 1
        return
    _stats["fast"] += 1
    assert want is not None, "the fast path read a text that the full loader refuses"
    assert got == want or repr(got) == repr(want)  # (repr: a nan is not equal to itself)


_stats = {"fast": 0, "over": 0}


def test_the_random_texts_take_both_paths():
    """Not vacuous: the property above reads most texts itself, and hands some over."""
    if _stats["fast"] + _stats["over"] == 0:
        test_the_fast_path_reads_what_the_full_loader_reads_or_hands_the_text_over()
    assert _stats["fast"] > 80 and _stats["over"] > 30, _stats


BAD = """\
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
    - name: a
      tier: cloud
      nodeGroups:
        - {name: n, count: 2, arch: x86_64, cpu: 4, memory: lots}
    - name: b
      tier: moon
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: t}
spec: {weight: -1}
---
kind: Nothing
"""


def test_problems_read_by_the_fast_path_name_the_same_fields_and_lines():
    assert isinstance(fastyaml.documents(BAD)[0], list)  # this text is the fast path's
    fast = [p for p in _parse_file("bad.yaml", BAD) if isinstance(p, Problem)]
    full = [p for p in _parse_file_fully("bad.yaml", BAD) if isinstance(p, Problem)]
    assert len(fast) >= 4 and fast == full
    assert {p.line for p in fast} >= {9, 11, 16, 18}


def test_a_repeated_key_is_reported_with_both_lines():
    text = "apiVersion: suanli/v1\nkind: Tenant\nmetadata: {name: t}\nspec: {weight: 1}\nkind: Tenant\n"
    found = [p for p in _parse_file("t.yaml", text) if isinstance(p, Problem)]
    assert len(found) == 1 and found[0].line == 5 and "first on line 2" in found[0].message
