"""Untrusted files: bounded, regular files only, limits checked before any parser (issue 16)."""

from __future__ import annotations

import os

import pytest

from attnplan.policy.errors import InvalidInputError
from attnplan.safeio import parse_json, parse_yaml, read_bounded


def test_devices_fifos_and_directories_are_refused_without_reading(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would block forever without O_NONBLOCK
    for path, words in (("/dev/zero", "not a regular file"), (fifo, "not a regular file"), (tmp_path, "directory")):
        with pytest.raises(InvalidInputError, match=words):
            read_bounded(path, what="model_config")


def test_size_limit_and_encoding(tmp_path):
    f = tmp_path / "big.json"
    f.write_bytes(b"1" * 101)
    with pytest.raises(InvalidInputError, match="over the 100-byte limit"):
        read_bounded(f, what="x", max_bytes=100)
    f.write_bytes(b"\xff\xfe")
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        read_bounded(f, what="x")
    f.write_text('{"a": 1}')
    assert read_bounded(f, what="x") == '{"a": 1}'


@pytest.mark.parametrize("text, words", [
    ("[" * 200_000, "nested deeper"),
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ('{"a": NaN}', "NaN"),
    ('{"a": ', "not valid JSON"),
])
def test_json_refusals(text, words):
    with pytest.raises(InvalidInputError, match=words):
        parse_json(text, what="x", name="f")


def test_json_strings_may_hold_brackets():
    assert parse_json('{"a": "[[[[{{{{"}', what="x", name="f", max_depth=2) == {"a": "[[[[{{{{"}


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


@pytest.mark.parametrize("text, words", [
    ("a: " + "[" * 200_000, "nested deeper"),              # libyaml segfaults on this without the check
    ("x: don't " + "[" * 200_000, "nested deeper"),        # an apostrophe must not hide the brackets
    ("".join("  " * i + "not:\n" for i in range(3000)), "nested deeper"),
    (BOMB, "expands to more than 500000 YAML nodes"),  # before its 72 aliases are counted
    ("rules:\n - id: x\n   require: 1\n   require: 2\n", "duplicate key 'require' at line 4"),
    ("a: [1\n", "not valid YAML at line"),
])
def test_yaml_refusals(text, words):
    with pytest.raises(InvalidInputError, match=words):
        parse_yaml(text, what="x", name="f")


def test_yaml_ordinary_documents_load():
    assert parse_yaml("a: [1, {b: 2}]\nc: 'x[y'\nd: &d 3\ne: *d\n", what="x", name="f") == \
        {"a": [1, {"b": 2}], "c": "x[y", "d": 3, "e": 3}
