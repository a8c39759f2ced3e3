"""How far a timing can be trusted: the spread of its repeats and, on the CPU, how busy the machine was.

A figure taken on a busy machine reads like any other: CPU timings on a shared two-core machine
swung by about 30 % and a tuned kernel exported at 0.97x the hand-picked one, with nothing to say
so.  A measurement therefore carries a `warning` (MeasureResult.warning, the trial's JSON line, its
NNI metric and its record): "" where neither sign below shows, else a short sentence naming each.

- Noisy: the repeats' standard deviation is more than SPREAD_LIMIT of their median.  Each repeat
  already averages `min_repeat_ms` of calls, so a steady device keeps them within a percent or two.
- Busy (a local CPU): while the kernel was verified and timed, processes other than the runner used
  more than BUSY_LIMIT of the machine's cores (psutil: the system's CPU time less the runner's
  own).  The runner holds the CPU's lock (trial/devicelock.py), so this suite's own builds are not
  among them: they are other users, services of other lock folders, anything else on the host.
  A window shorter than MIN_WINDOW_S is not judged (the kernel's clock ticks every 10 ms).
A GPU kernel is not disturbed by a busy host in the same way, so only its spread is judged.
"""
from __future__ import annotations

import time
from types import TracebackType

import psutil

SPREAD_LIMIT = 0.05
BUSY_LIMIT = 0.10
MIN_WINDOW_S = 0.1


def _busy_s(times: object) -> float:
    """CPU seconds spent working (not idle, not waiting for I/O) in psutil's `cpu_times()`."""
    return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


class OthersLoad:
    """Measures, over a `with` block, the share of all cores that processes other than this one used
    (`share`: 0 to 1; None where the block was too short to tell)."""

    share: float | None = None

    def __enter__(self) -> OthersLoad:
        self._me, self.cores = psutil.Process(), psutil.cpu_count() or 1
        self._start = time.monotonic(), _busy_s(psutil.cpu_times()), self._own_s()
        return self

    def _own_s(self) -> float:
        own = self._me.cpu_times()
        return own.user + own.system

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        start, busy, own = self._start
        wall = time.monotonic() - start
        others = (_busy_s(psutil.cpu_times()) - busy) - (self._own_s() - own)
        self.share = max(0.0, others) / (wall * self.cores) if wall >= MIN_WINDOW_S else None


def warning(latency_ms: float | None, latency_std_ms: float | None, load: OthersLoad | None = None) -> str:
    """The measurement's warning: "" where its timing looks sound, else what makes it doubtful."""
    notes = []
    if latency_ms and latency_std_ms is not None and latency_std_ms / latency_ms > SPREAD_LIMIT:
        notes.append(f"noisy timing: the repeats' standard deviation is {latency_std_ms / latency_ms:.0%} of "
                     f"their median (over {SPREAD_LIMIT:.0%})")
    if load is not None and load.share is not None and load.share > BUSY_LIMIT:
        notes.append(f"busy CPU: other processes used {load.share * load.cores:.1f} of its {load.cores} cores "
                     f"while the kernel was timed")
    return "; ".join(notes)
