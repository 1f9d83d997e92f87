"""Review: precedence is flag > environment > file > default, key by key. `loosening_keys`
set by a variable (or a flag) should replace the file's `[[proxy_keys]]` marks, as `config
show` says it does (it names the variable as the value's origin); the file's marked keys
kept loosening instead. Fixed: `ConfigFile` drops the file's marks when a flag or a variable
gives `loosening_keys` (those keys stay proxy keys)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spillguard.config import Origins
from spillguard.settings import Settings

FILE = """
[[proxy_keys]]
key = "file-admin-key"
may_loosen = true

[[proxy_keys]]
key = "file-user-key"
"""


def test_the_variable_replaces_the_files_loosening_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "spillguard.toml"
    path.write_text(FILE)
    monkeypatch.setenv("SPILLGUARD_LOOSENING_KEYS", "env-admin-key")
    settings = Settings(config=str(path))
    assert Origins.of({"config": str(path)})("loosening_keys") == "SPILLGUARD_LOOSENING_KEYS"
    loosening = [k.get_secret_value() for k in settings.loosening_keys]
    assert loosening == ["env-admin-key"]


def test_the_flag_replaces_the_files_loosening_keys(tmp_path: Path) -> None:
    path = tmp_path / "spillguard.toml"
    path.write_text(FILE)
    settings = Settings(config=str(path), loosening_keys="flag-admin-key")
    assert [k.get_secret_value() for k in settings.loosening_keys] == ["flag-admin-key"]
