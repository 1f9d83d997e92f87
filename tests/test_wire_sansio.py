"""The wire formats (and the other pure modules the decision uses: the outcome record, the
start policy) are sans-IO, transitively: importing one in a fresh interpreter loads no event
loop, HTTP library, metrics client or database (issue 11). `test_detect_sansio.py` reads
the detection core's source; this runs the imports, so a module pulled in indirectly counts too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = [
    "spillguard.wire",
    "spillguard.chat",
    "spillguard.responses",
    "spillguard.sse",
    "spillguard.rawjson",
    "spillguard.errors",
    "spillguard.outcome",
    "spillguard.start",
]
FORBIDDEN = frozenset(
    {
        "aiohttp",
        "anyio",
        "asyncio",
        "fastapi",
        "httpx",
        "prometheus_client",
        "socket",
        "sqlite3",
        "starlette",
        "uvicorn",
    }
)
PROBE = (
    "import importlib, json, sys\n"
    "importlib.import_module(sys.argv[1])\n"
    "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
)


def loaded_by(module: str) -> set[str]:
    """The top-level packages loaded in a fresh interpreter that imports `module`."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("module", PURE)
def test_importing_a_wire_module_loads_no_io(module: str) -> None:
    loaded = loaded_by(module)
    assert "spillguard" in loaded  # the probe did import it
    assert loaded & FORBIDDEN == set()


def test_the_probe_sees_an_indirect_import() -> None:
    """The check can fail: the decision pulls in the network stack through `upstream.py`."""
    assert {"asyncio", "aiohttp"} <= loaded_by("spillguard.proxy")
