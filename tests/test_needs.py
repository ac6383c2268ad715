"""A missing test need skips on a developer's machine and fails under strict (CI)."""

from __future__ import annotations

import needs
import pytest


def test_a_missing_need_skips_saying_what_and_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(needs, "STRICT", False)
    with pytest.raises(pytest.skip.Exception, match="Python module no_such_module_x"):
        needs.module("no_such_module_x")
    with pytest.raises(pytest.skip.Exception, match="setup-host --test"):
        needs.program("no-such-program-x")


def test_under_strict_a_missing_need_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(needs, "STRICT", True)
    with pytest.raises(pytest.fail.Exception, match="STRICT_TESTS=1 but program no-such"):
        needs.program("no-such-program-x")
    with pytest.raises(pytest.fail.Exception, match="module no_such_module_x"):
        needs.module("no_such_module_x")


def test_what_is_there_is_returned() -> None:
    assert needs.module("json").dumps([]) == "[]"
    assert needs.program("sh", "/bin/sh").endswith("sh")
