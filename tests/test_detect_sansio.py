"""The detection core is sans-IO: no module under app/spillguard/detect imports an event loop,
an HTTP library or sockets (issue 2: "pure functions and small state machines")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DETECT = Path(__file__).resolve().parent.parent / "app" / "spillguard" / "detect"
FORBIDDEN = frozenset(
    {"asyncio", "aiohttp", "httpx", "fastapi", "starlette", "uvicorn", "anyio", "socket"}
)


def imported_modules(source: str) -> set[str]:
    """Every module a source imports: import statements anywhere (also inside functions), and
    __import__("x") / importlib.import_module("x") calls with a literal name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            first = node.args[0]
            if (
                name in ("__import__", "import_module")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                found.add(first.value)
    return found


def forbidden_in(source: str) -> set[str]:
    return {m for m in imported_modules(source) if m.split(".")[0] in FORBIDDEN}


MODULES = sorted(DETECT.glob("*.py"))


def test_the_package_is_where_we_look() -> None:
    names = {p.name for p in MODULES}
    assert {"__init__.py", "markers.py", "blob.py", "scanner.py", "tools.py", "turn.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_is_sans_io(path: Path) -> None:
    assert forbidden_in(path.read_text(encoding="utf-8")) == set()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import asyncio", {"asyncio"}),
        ("import os, socket", {"socket"}),
        ("from aiohttp import web", {"aiohttp"}),
        ("from starlette.responses import Response", {"starlette.responses"}),
        ("import httpx as h", {"httpx"}),
        ("def f():\n    import uvicorn\n", {"uvicorn"}),
        ("try:\n    import anyio\nexcept ImportError:\n    pass\n", {"anyio"}),
        ("if TYPE_CHECKING:\n    from fastapi import Request\n", {"fastapi"}),
        ("m = __import__('socket')", {"socket"}),
        ("import importlib\nm = importlib.import_module('asyncio')", {"asyncio"}),
        ("import json, re\nfrom . import scanner\nfrom .tools import ToolSet", set()),
        ("import asyncio_helpers", set()),
        ("text = 'import asyncio'", set()),
    ],
)
def test_the_checker_itself(source: str, expected: set[str]) -> None:
    assert forbidden_in(source) == expected
