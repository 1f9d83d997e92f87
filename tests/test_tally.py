"""`tally.Tally` against prometheus-client: the same observations, the same exposition."""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from spillguard.metrics import (
    ADDED_BUCKETS,
    ADDED_LATENCY,
    REQUESTS,
    UPSTREAM_BUCKETS,
    UPSTREAM_LATENCY,
)
from spillguard.tally import Buckets, Count, Tally

CREATED = re.compile(rb"^(\w+_created\{[^}]*\}) \S+$", re.MULTILINE)


class Action(StrEnum):
    PASSED = "passed"
    RETRIED = "retried"


def _exposed(*collectors: Any) -> bytes:
    """Their exposition, each `_created` value (a clock reading) blanked."""
    registry = CollectorRegistry(auto_describe=True)
    for collector in collectors:
        registry.register(collector)
    return CREATED.sub(rb"\1 T", generate_latest(registry))


def _both(
    definition: tuple[str, str, list[str]], buckets: tuple[float, ...] | None = None
) -> tuple[Any, Any]:
    if buckets is None:
        return Counter(*definition, registry=None), Tally(*definition)
    return (
        Histogram(*definition, buckets=buckets, registry=None),
        Tally(*definition, buckets=buckets),
    )


def test_the_request_counter_exposes_what_prometheus_client_does() -> None:
    theirs, ours = _both(REQUESTS)
    assert _exposed(theirs) == _exposed(ours)  # no child yet: its help and type alone
    for labels, amount in [
        (("chat", "retry", Action.PASSED, "default"), 1),
        (("chat", "retry", Action.RETRIED, "default"), 1),
        (("messages", "observe", Action.PASSED, "kimi"), 2.5),
        (("chat", "retry", Action.PASSED, "default"), 1),
    ]:
        theirs.labels(*labels).inc(amount)
        ours.labels(*labels).inc(amount)
    exposed = _exposed(ours)
    assert exposed == _exposed(theirs)
    assert (
        b'spillguard_requests_total{mode="retry",outcome="passed",route="chat",upstream="default"}'
        b" 2.0\n" in exposed
    )


@pytest.mark.parametrize(
    ("definition", "buckets"),
    [(UPSTREAM_LATENCY, UPSTREAM_BUCKETS), (ADDED_LATENCY, ADDED_BUCKETS)],
)
def test_the_latency_histograms_expose_what_prometheus_client_does(
    definition: tuple[str, str, list[str]], buckets: tuple[float, ...]
) -> None:
    theirs, ours = _both(definition, buckets)
    labels = ("chat", "default")[: len(definition[2])]
    other = ("responses", "kimi")[: len(definition[2])]
    # Below, on and between the bounds, past the last, zero, and a child never observed.
    amounts = [0.0, 1e-9, *buckets, *(b * 1.5 for b in buckets), 10_000.0, 0.0123]
    for amount in amounts:
        theirs.labels(*labels).observe(amount)
        ours.labels(*labels).observe(amount)
    theirs.labels(*other)
    ours.labels(*other)
    assert _exposed(ours) == _exposed(theirs)


def test_nan_counts_in_the_sum_and_no_bucket_as_in_prometheus_client() -> None:
    theirs, ours = _both(ADDED_LATENCY, ADDED_BUCKETS)
    for amount in (0.001, math.nan):
        theirs.labels("chat").observe(amount)
        ours.labels("chat").observe(amount)
    assert _exposed(ours) == _exposed(theirs)


def test_children_are_kept_by_their_label_values() -> None:
    tally = Tally(*REQUESTS)
    child = tally.labels("chat", "retry", Action.PASSED, "default")
    assert isinstance(child, Count)
    assert tally.labels("chat", "retry", "passed", "default") is child
    histogram = Tally(*ADDED_LATENCY, buckets=ADDED_BUCKETS)
    assert isinstance(histogram.labels("chat"), Buckets)
    with pytest.raises(ValueError):
        tally.labels("chat")


def test_a_bucket_holds_what_is_at_most_its_bound() -> None:
    buckets = Buckets((0.5, 1.0, math.inf))
    for amount in (0.5, 0.50001, 1.0, 7.0):
        buckets.observe(amount)
    assert buckets.counts == [1.0, 2.0, 1.0]
    assert buckets.sum == pytest.approx(9.00001)
