"""How prometheus_client's MultiProcessCollector lays out what SGLang's processes wrote, series by series.

No ``_created`` samples; labels in sorted order (the merge keys them by a sorted tuple); gauges of the default
multiprocess mode ``all`` labelled with the writing process's ``pid``; histogram series as ``_sum``, the cumulative
``_bucket`` rows, then ``_count``; a family only once one of its series was written. Family order is first-seen
order; a real server's follows the directory listing of its .db files, so no reader may rely on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

Labels = Mapping[str, str]


def series(labels: Labels, **extra: str) -> dict[str, str]:
    """One series' labels in MultiProcessCollector's order: sorted by name."""
    merged = {**labels, **extra}
    return {name: merged[name] for name in sorted(merged)}


class Page:
    """Families by name in first-seen order, filled series by series as the collector merges them."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}

    def _family(self, name: str, doc: str, kind: str) -> Metric:
        family = self.families.get(name)
        if family is None:
            family = self.families[name] = Metric(name, doc, kind)
        return family

    def gauge(self, name: str, doc: str, labels: Labels, value: float, pid: int | None = None) -> None:
        """A gauge; ``pid`` for multiprocess_mode 'all' (the default), which keeps each writer's own series."""
        extra = {} if pid is None else {"pid": str(pid)}
        self._family(name, doc, "gauge").add_sample(name, {**series(labels), **extra}, float(value))

    def counter(self, name: str, doc: str, labels: Labels, value: float) -> None:
        base = name.removesuffix("_total")
        self._family(base, doc, "counter").add_sample(base + "_total", series(labels), float(value))

    def histogram(self, name: str, doc: str, labels: Labels, buckets: Sequence[float], count: float,
                  total: float) -> None:
        """A histogram series: _sum, then the cumulative buckets, then _count, as the multiprocess merge emits.

        Every observation sits in the first bucket that holds the mean, so bucket counts stay whole numbers.
        """
        family = self._family(name, doc, "histogram")
        ordered = series(labels)
        family.add_sample(name + "_sum", ordered, float(total))
        mean = total / count if count else 0.0
        for upper in (*buckets, math.inf):
            family.add_sample(name + "_bucket", {**ordered, "le": floatToGoString(upper)},
                              float(count) if mean <= upper else 0.0)
        family.add_sample(name + "_count", ordered, float(count))

    def metrics(self) -> list[Metric]:
        return list(self.families.values())
