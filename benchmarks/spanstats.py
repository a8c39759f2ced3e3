"""Statistics over an experiment's span: the host's CPU, each GPU's lock, and the rate between its ends.

An experiment of N trials starts with nothing to time (the first trials start, import and build) and
ends while the GPUs' queues drain; on more GPUs the same N trials take less time, so those ends weigh
more in its trials/s.  `steady_rate` counts the trials between the ends, and `device_use` says how
much of each GPU's span lay before its first trial and after its last.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

STEADY_TRIM = 0.1
"""The share of trials left out at each end for the steady rate."""


def host_busy_s() -> float:
    """CPU seconds all cores of this host have spent busy since boot (not idle, not waiting for I/O)."""
    import psutil

    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def host_cpu(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Busy core-seconds a second over [start, end] from (time, `host_busy_s`) samples: the rate between
    the first sample at or after `start` and the last at or before `end` (None where fewer than two)."""
    inside = [(t, busy) for t, busy in samples if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def steady_rate(ends: list[float], trim: float = STEADY_TRIM) -> float | None:
    """Trials a second between the trial that ended `trim` of the way through and the one that ended
    1 - `trim` of the way (None for fewer than ten trials, or no time between them)."""
    if len(ends) < 10:
        return None
    ends = sorted(ends)
    first, last = math.floor(trim * len(ends)), math.ceil((1 - trim) * len(ends)) - 1
    seconds = ends[last] - ends[first]
    return (last - first) / seconds if seconds > 0 else None


def device_use(spans: list[tuple[Any, float, float]], start: float, end: float) -> dict[str, float | None]:
    """From (device, held, released) of each trial's hold of its device's lock, means over the devices:
    "held", the share of [start, end] a device's lock was held; "free_s", the seconds it stood free
    between two trials; "ends_s", the seconds of [start, end] before its first hold and after its last, of
    which "before_s" before its first."""
    by_device: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for dev, held, released in spans:
        by_device[dev].append((held, released))
    if not by_device or end <= start:
        return {"held": None, "free_s": None, "ends_s": None, "before_s": None}
    shares, gaps, ends, before = [], [], [], []
    for holds in by_device.values():
        holds.sort()
        shares.append(sum(r - h for h, r in holds) / (end - start))
        gaps += [max(0.0, h2 - r1) for (_, r1), (h2, _) in zip(holds, holds[1:])]
        before.append(max(0.0, holds[0][0] - start))
        ends.append(before[-1] + max(0.0, end - max(r for _, r in holds)))
    return {"held": statistics.fmean(shares), "free_s": statistics.fmean(gaps) if gaps else None,
            "ends_s": statistics.fmean(ends), "before_s": statistics.fmean(before)}
