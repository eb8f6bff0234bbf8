"""The docs say what the program does: a command they say is missing is
not there, their headings are headings, the archs they pass are the ones
fleets name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suanli.cli import app

DOCS = sorted((Path(__file__).resolve().parents[1] / "docs").glob("*.md"))
COMMANDS = {c.name or c.callback.__name__ for c in app.registered_commands} | \
    {g.name for g in app.registered_groups}


def test_the_docs_are_found():
    assert len(DOCS) > 5 and "simulate" in COMMANDS and "serve" in COMMANDS


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_a_doc_says_no_command_is_missing_that_is_there(doc):
    said = re.findall(r"there\s+is\s+no\s+`suanli\s+(\w+)`", doc.read_text())
    assert not [c for c in said if c in COMMANDS], said


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_a_docs_headings_are_one_heading_a_line(doc):
    doubled = [line for line in doc.read_text().splitlines() if re.match(r"#+ .*\S#+ ", line)]
    assert not doubled, doubled


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_archs_a_doc_passes_are_named_as_fleets_name_them(doc):
    archs = re.findall(r"--arch (\S+)", doc.read_text())
    assert not [a for a in archs if a in ("arm64", "amd64", "x64")], archs
