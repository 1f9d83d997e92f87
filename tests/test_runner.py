"""runner.py: the serving process's collector settings, and the workers' factory."""

from __future__ import annotations

import subprocess
import sys

import uvicorn.importer

from spillguard import runner


def test_tune_gc_sets_the_thresholds() -> None:
    # In a child process: this one's collector is left as it is.
    code = (
        "import gc; from spillguard.runner import tune_gc; tune_gc(); "
        "print(gc.get_threshold(), gc.isenabled(), gc.get_threshold() != (700, 10, 10))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"{runner.GC_THRESHOLD} True True"


def test_the_workers_factory_is_importable_by_uvicorn() -> None:
    assert uvicorn.importer.import_from_string("spillguard.runner:worker_app") is runner.worker_app
