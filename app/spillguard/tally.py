"""The per-request counts of a single process, kept in plain Python (`Tally`) and handed to
prometheus-client when it is scraped.

Every finished request adds to one counter and two histograms. prometheus-client takes a lock
and checks its arguments on every increment and observation, and walks a histogram's buckets
one by one: about 2.9 µs of every request (bench/RESULTS.md). Here the event loop adds to
floats; a scrape (another thread) reads them. Only the loop writes, so no increment is lost,
and a histogram's count is read off its buckets, so a scrape sees it consistent with them
(its sum may be one observation behind, as prometheus-client's own may).

A `Tally` exposes exactly what the prometheus-client metric of the same name, documentation,
labels and buckets would (tests/test_tally.py compares the two). In multi-process mode the
values must live in prometheus-client's shared files, and `metrics.py` keeps its metrics.
"""

from __future__ import annotations

import math
import os
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

# prometheus-client's own switch for the `_created` series, read the way it reads it.
CREATED = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in (
    "true",
    "1",
    "t",
)


class Count:
    """One labelled counter's value."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class Buckets:
    """One labelled histogram's observations: the count in each bucket (not cumulative), and
    their sum."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.sum += amount
        if amount <= math.inf:  # NaN lands in no bucket, as in prometheus-client
            self.counts[bisect_left(self.bounds, amount)] += 1


class Tally:
    """A labelled counter (`buckets` None) or histogram, as a prometheus-client collector:
    `labels(*values)` is the child to count on (`Count` or `Buckets`)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float] | None = None,
    ) -> None:
        self.name = name.removesuffix("_total") if buckets is None else name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds: tuple[float, ...] | None = None
        self.les: tuple[str, ...] = ()  # each bound as its `le` label writes it
        if buckets is not None:
            bounds = [float(b) for b in buckets]
            if bounds[-1] != math.inf:
                bounds.append(math.inf)
            self.bounds = tuple(bounds)
            self.les = tuple(floatToGoString(b) for b in bounds)  # type: ignore[no-untyped-call]
        self.children: dict[tuple[str, ...], Count | Buckets] = {}

    def labels(self, *values: str) -> Count | Buckets:
        key = tuple(str(v) for v in values)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected")
        child = self.children.get(key)
        if child is None:
            child = Count() if self.bounds is None else Buckets(self.bounds)
            self.children[key] = child
        return child

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for values, child in list(self.children.items()):
            created = child.created if CREATED else None
            if isinstance(child, Count):
                assert isinstance(family, CounterMetricFamily)
                family.add_metric(values, child.value, created=created)
                continue
            assert isinstance(family, HistogramMetricFamily)
            counts, total, acc = list(child.counts), child.sum, 0.0
            cumulative = []
            for le, count in zip(self.les, counts, strict=True):
                acc += count
                cumulative.append((le, acc))
            family.add_metric(values, cumulative, total)
            if created is not None:
                labels = dict(zip(self.labelnames, values, strict=True))
                family.samples.append(Sample(f"{self.name}_created", labels, created, None))
        return [family]

    def _family(self) -> Metric:
        if self.bounds is None:
            return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
