"""Shares of a host for runs side by side: each its own GPU and its own physical cores.

MetaSchedule's runs are CPU-heavy (its evolutionary search, its cost model, its builder) and each times
its candidates on the GPUs it sees.  Several at once must not share cores, or each measures its share of a
busy host: so each gets one GPU and a slice of the physical cores, a core's hardware threads kept
together (Linux numbers a core's second thread apart from its first, cpu0 and cpu32 on a 64-thread host).
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Share:
    """One run's part of the host: the GPUs it sees (CUDA_VISIBLE_DEVICES) and the logical CPUs it runs on."""

    gpus: str
    cpus: tuple[int, ...]
    cores: int  # the physical cores those CPUs are

    def describe(self) -> dict[str, object]:
        return {"gpus": self.gpus, "cpus": len(self.cpus), "cores": self.cores}


def physical_cores(cpus: set[int] | None = None, sysfs: Path = Path("/sys/devices/system/cpu")) -> list[list[int]]:
    """The logical CPUs this process may run on, grouped by the physical core they belong to (each group
    sorted, groups by their first CPU); one CPU a group where the topology is not readable."""
    cpus = set(os.sched_getaffinity(0)) if cpus is None else cpus
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for cpu in sorted(cpus):
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            key = ((topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip())
        except OSError:
            key = ("cpu", str(cpu))
        groups[key].append(cpu)
    return sorted(groups.values())


def shares(count: int, gpus: list[str], cores: list[list[int]]) -> list[Share]:
    """`count` shares of the host: share i sees GPU i and the i-th of `count` equal runs of the physical
    cores (the remainder to the first ones); ValueError where there are fewer GPUs or cores than shares."""
    if count > len(gpus):
        raise ValueError(f"{count} runs side by side need a GPU each; {len(gpus)} visible")
    if count > len(cores):
        raise ValueError(f"{count} runs side by side need a core each; {len(cores)} usable")
    size, extra = divmod(len(cores), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(Share(gpus[i], tuple(cpu for core in cores[start:end] for cpu in core), end - start))
        start = end
    return out


def visible_gpus(count: int) -> list[str]:
    """The ids of the GPUs this process sees, as CUDA_VISIBLE_DEVICES names them (0..count-1 if unset)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [g.strip() for g in listed.split(",") if g.strip()][:count]
    return [str(i) for i in range(count)]
