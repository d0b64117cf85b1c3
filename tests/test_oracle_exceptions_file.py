"""Issue 39: the vLLM oracle's named exceptions are data it cannot run without - a missing file is an
error naming it, never an oracle that silently has no exceptions."""

from __future__ import annotations

import pytest

from attnplan.errors import SourceNotFoundError
from attnplan.oracle.compare import EXCEPTIONS_FILE, load_exceptions


def test_a_missing_exceptions_file_is_an_error_naming_it(tmp_path):
    gone = tmp_path / "exceptions.yaml"
    with pytest.raises(SourceNotFoundError, match="exceptions.yaml"):
        load_exceptions(gone)


def test_the_shipped_file_sits_beside_the_oracle_and_loads():
    assert EXCEPTIONS_FILE.parent.name == "oracle" and EXCEPTIONS_FILE.is_file()
    assert load_exceptions() and all(e.id and e.reason for e in load_exceptions())
