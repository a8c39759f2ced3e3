"""The knowledge base: what the records already hold for a task on this device (AOE's REPEAT_TUNE).

Every trial keeps its measurement in the records store (trial/records), so a kernel tuned for one model
serves every later model with the same shape.  A task whose workload has a verified kernel on this
device, with knobs that one of the op's templates takes now (`Records.best_kernel`, as `make tune`
checks in experiments/tune.py), is not measured again unless the user asks to retune.  Records of the same
workload on other devices do not count, but are named, so the user knows why it is tuned afresh.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from trial.records import Record, Records, default_path
from trial.workload import Workload


@dataclass(frozen=True)
class Known:
    """What the records say of one workload: its best kernel on this device, else a note why none."""

    best: Record | None
    note: str | None = None


def lookup(wl: Workload, device: str) -> Known:
    """The best verified kernel of `wl` recorded on `device` that a template takes now, if any."""
    if not default_path().exists():
        return Known(None)
    store = Records()
    found = store.best_kernel(wl, device)
    if found:
        return Known(found)
    elsewhere = Counter(r.device for r in store.query(wl.key, status="ok") if r.device != device)
    if not elsewhere:
        return Known(None)
    where = ", ".join(f"{name} ({n} record{'s' * (n > 1)})" for name, n in elsewhere.most_common())
    return Known(None, f"the records hold {wl.key} only for other devices: {where}; no record of this "
                       f"device ({device}), so it is tuned afresh")
