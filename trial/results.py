"""What a measurement produces, shared by every stage and every tool that reads measurements.

`Status` names how a measurement ended; `MeasureResult` carries its figures; `STAGES` names where
its time went.  Plain data, no TVM, so tuners and the trial's supervising side can use it freely.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """How a measurement ended; compares equal to its value ("ok", ...), as reports and records store it."""

    OK = "ok"  # built, verified, timed
    INVALID = "invalid"  # knobs outside the space or beyond the device's limits
    COMPILE_ERROR = "compile_error"  # scheduling, compiling or linking failed
    RUNTIME_ERROR = "runtime_error"  # the kernel failed or crashed its process
    TIMEOUT = "timeout"  # the build or the run took too long and was killed
    WRONG_RESULT = "wrong_result"  # the output differs from the float64 reference

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


STATUSES = tuple(s.value for s in Status)

STAGES = ("startup", "setup", "build", "lock_wait", "run", "exit")
"""Seconds of one measurement, in order: reaching the measuring service (starting it, when none runs);
finding the target and a free build worker, the knob check, and waiting for the CPU to be free of
timings (trial/devicelock.py); compilation and export; waiting for the device (its runner, the
reference outputs, the device lock); verification and timing; the answer's way back.  They add up
to the whole call; a stage the measurement never reached is missing."""

REASON_CHARS = 600


@dataclass
class MeasureResult:
    status: str
    reason: str = ""
    params: dict[str, Any] | None = None
    gflops: float = 0.0
    latency_ms: float | None = None
    latency_std_ms: float | None = None
    build_s: float | None = None
    target: str = ""
    device: str = ""  # the device's model name
    device_index: int | None = None
    warning: str = ""  # "" where the timing looks sound, else why not (trial/noise.py)
    extra: dict[str, Any] = field(default_factory=dict)

    def report(self, parameter_id: Any = None) -> dict[str, Any]:
        """The metric dict a trial reports to NNI ("default" is what tuners optimise)."""
        out = {"default": self.gflops,
               **{k: v for k, v in asdict(self).items() if k not in ("extra", "device_index")}}
        out["status"] = str(self.status)
        out["timing"] = self.extra.get("timing", "")  # how it was timed: "graph" or "launch" (trial/run.py)
        if self.device_index is not None:
            out["device"] = f"{self.device} (device {self.device_index})"
        # NNI 3.0's dispatcher parses metrics with json_tricks, whose comment stripping breaks on
        # '#' inside nested strings (the metric is then lost): text carries a look-alike instead.
        for key in ("reason", "target", "device", "timing", "warning"):
            out[key] = out[key].replace("#", "\uff03")
        out["parameter_id"] = parameter_id
        return out


def error_reason(err: BaseException | str) -> str:
    """The informative tail of an exception (or its text): TVM errors carry long C++ tracebacks first."""
    text = err if isinstance(err, str) else str(err)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("File ", "Traceback", "^"))]
    body = " | ".join(lines[-4:])
    text = body if isinstance(err, str) else f"{type(err).__name__}: {body or type(err).__name__}"
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."
