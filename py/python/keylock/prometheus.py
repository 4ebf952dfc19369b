"""keylock's metrics for prometheus_client: a collector that reads lock objects opened with
``metrics=True`` at every scrape.

::

    import keylock, keylock.prometheus
    from prometheus_client import REGISTRY

    orders = keylock.KeyPool(metrics=True)
    REGISTRY.register(keylock.prometheus.collector(orders, name="orders"))

Each scrape reads ``orders.metrics()`` and yields, labelled ``lock="orders"``:

* the counters ``keylock_acquired_total``, ``keylock_contended_total``,
  ``keylock_timed_out_total``, ``keylock_would_block_total``, ``keylock_cancelled_total``,
  ``keylock_lease_expired_total``, ``keylock_owner_died_total``, ``keylock_lost_total`` and
  ``keylock_force_unlocked_total`` (the names the Rust core gives the ``metrics`` facade);
* the histograms ``keylock_wait_seconds`` (how long each granted acquire waited) and
  ``keylock_hold_seconds`` (how long each released acquisition was held), with the fixed
  bucket bounds of :data:`BUCKETS`, the same at every scrape.

One registry takes one collector with these names: put every lock object in it (``add``, or a
mapping given to :class:`KeylockCollector`). The collector keeps its lock objects alive until
they are removed.

prometheus_client is not a dependency of keylock: it is imported when a collector is made, and
a clear ImportError says so if it is missing. ``import keylock`` never needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from ._keylock import HistogramSnapshot, MetricsSnapshot

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["BUCKETS", "COUNTERS", "KeylockCollector", "Metered", "collector"]


class Metered(Protocol):
    """What a collector reads: a KeyPool, StripedLock or Semaphore opened with metrics=True."""

    def metrics(self) -> MetricsSnapshot | None: ...


#: The ``le`` bounds of the exported histograms, in seconds (``+Inf`` comes after them): every
#: other bucket bound of keylock's power-of-two histograms, from 2**10 - 1 ns (about 1 µs) to
#: 2**36 - 1 ns (about 69 s). Each is the upper bound of one of keylock's own buckets, so every
#: cumulative count is exact: the durations of at most ``le`` seconds.
BUCKETS: tuple[float, ...] = HistogramSnapshot.BOUNDS[10:37:2]

#: The counters, as (the MetricsSnapshot attribute, the help text); each is exported as
#: ``keylock_<attribute>_total``.
COUNTERS: tuple[tuple[str, str], ...] = (
    ("acquired", "Acquisitions granted (a lock_many acquire counts each key it takes)."),
    ("contended", "Acquire calls that could not be granted at once and waited."),
    ("timed_out", "Acquire calls that waited as long as their timeout allowed and failed."),
    ("would_block", "Tries (non-blocking acquires) that failed."),
    ("cancelled", "asyncio acquires given up before they finished (the task was cancelled)."),
    ("lease_expired", "Releases refused because the acquisition's lease had ended."),
    ("owner_died", "Acquisitions whose previous holder died holding the key."),
    ("lost", "Releases refused because the hold had ended behind its holder's back."),
    ("force_unlocked", "Force-unlocks that freed a held key."),
)

_HISTOGRAMS: tuple[tuple[str, str], ...] = (
    ("wait", "How long each granted acquire call waited (0 when granted at once)."),
    ("hold", "How long each released acquisition was held, from its grant to its release."),
)


def _missing() -> ImportError:
    return ImportError(
        "keylock.prometheus needs the prometheus_client package, which keylock does not "
        "install: pip install prometheus-client"
    )


def _check_installed() -> None:
    try:
        import prometheus_client  # noqa: F401 - only whether it imports
    except ImportError as e:
        raise _missing() from e


def _cumulative(h: HistogramSnapshot) -> list[tuple[str, float]]:
    """The histogram's buckets as Prometheus counts them: for each bound of BUCKETS, then
    +Inf, the number of durations at most that long."""
    from prometheus_client import utils

    # How prometheus_client writes a bound itself (its Histogram's `le` labels).
    format_le: Callable[[float], str] = utils.floatToGoString
    pairs = h.buckets
    out: list[tuple[str, float]] = []
    seen = 0
    i = 0
    for le in BUCKETS:
        while i < len(pairs) and pairs[i][0] <= le:
            seen += pairs[i][1]
            i += 1
        out.append((format_le(le), seen))
    out.append(("+Inf", h.count))
    return out


class KeylockCollector:
    """A prometheus_client collector of the metrics of named lock objects (see the module
    docs). Register it once: ``REGISTRY.register(KeylockCollector({"orders": pool}))``."""

    def __init__(self, locks: Mapping[str, Metered] | None = None) -> None:
        _check_installed()
        self._mutex = threading.Lock()
        self._locks: dict[str, Metered] = {}
        for name, lock in (locks or {}).items():
            self.add(lock, name)

    def add(self, lock: Metered, name: str) -> None:
        """Export `lock`'s metrics labelled ``lock=name``. ValueError if `lock` was opened
        without metrics=True or the name is taken."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if lock.metrics() is None:
            raise ValueError(f"{lock!r} was opened without metrics=True: it counts nothing")
        with self._mutex:
            if name in self._locks:
                raise ValueError(f"a lock object named {name!r} is already collected")
            self._locks[name] = lock

    def remove(self, name: str) -> None:
        """Stop exporting the lock object named `name` (KeyError if there is none)."""
        with self._mutex:
            del self._locks[name]

    def describe(self) -> Iterator[Metric]:
        """The metric families this collector yields, without samples (for the registry's
        check that no two collectors yield the same names)."""
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        """One snapshot of every lock object, as metric families."""
        with self._mutex:
            locks = list(self._locks.items())
        snapshots = {}
        for name, lock in locks:
            m = lock.metrics()
            if m is not None:
                snapshots[name] = m
        return self._families(snapshots)

    @staticmethod
    def _families(snapshots: Mapping[str, MetricsSnapshot]) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily

        for attr, doc in COUNTERS:
            counter = CounterMetricFamily(f"keylock_{attr}", doc, labels=["lock"])
            for name, m in snapshots.items():
                counter.add_metric([name], getattr(m, attr))
            yield counter
        for attr, doc in _HISTOGRAMS:
            histogram = HistogramMetricFamily(
                f"keylock_{attr}_seconds", doc, labels=["lock"], unit="seconds"
            )
            for name, m in snapshots.items():
                h: HistogramSnapshot = getattr(m, attr)
                histogram.add_metric([name], _cumulative(h), sum_value=h.sum)
            yield histogram


def collector(lock: Metered, name: str) -> KeylockCollector:
    """A collector of `lock`'s metrics, labelled ``lock=name``: register it with
    ``prometheus_client.REGISTRY.register(...)`` (or a CollectorRegistry of your own). More lock
    objects go into the same collector with its ``add``."""
    return KeylockCollector({name: lock})
