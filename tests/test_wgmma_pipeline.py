"""The wgmma kernel's stage pipeline (producer 1), modelled and explored through every interleaving, against
the template's rules: the rules admit exactly the (stages, in_flight, slices) for which no interleaving
deadlocks or lets a slice read a tile other than its own.

The model follows wgmma_kernel.py: the producer loads K tile t into stage t % stages once the release of
tile t - stages completed that stage's "empty" mbarrier phase; a TMA copy completes the stage's "full"
phase when it lands, in any order relative to other copies; slice j multiplies tiles j, j + slices, ...,
each after waiting on its stage's full mbarrier with the parity (t // stages) % 2, and releases a tile
once it has committed `in_flight` tiles after it.  An mbarrier wait on parity P passes while the current
phase's parity differs from P, as PTX's `mbarrier.try_wait.parity` does.  (A cluster that shares B doubles
each empty phase's arrivals, from both CTAs' slices of the same tile; the order of phases is the same.)
"""
from __future__ import annotations

import pytest

from trial.archs import target_of
from trial.constraints import KernelRules
from trial.templates import wgmma
from trial.workload import parse_name

TILES = 8  # K tiles of a CTA in the model and the workload below


def explore(stages: int, slices: int, in_flight: int, in_order: bool = False) -> str:
    """'ok', 'deadlock' (no move left before every slice is done) or 'wrong data' (a slice's wait passed
    while its stage held another tile), over every interleaving (`in_order`: copies land as issued)."""
    per_slice = TILES // slices
    # producer's next tile, each slice's next index, completed full/empty phases per stage, the tile whose
    # copy last landed in each stage, copies in flight, each slice's committed tiles not yet released
    start = (0, (0,) * slices, (0,) * stages, (0,) * stages, (None,) * stages, (), ((),) * slices)
    seen, stack = set(), [start]
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        issued, index, full, empty, landed, flying, held = state
        moves = []
        s = issued % stages
        if issued < TILES and (issued < stages or empty[s] % 2 != (issued // stages + 1) % 2):
            moves.append((issued + 1, index, full, empty, landed, flying + (issued,), held))
        for t in flying[:1] if in_order else flying:
            s = t % stages
            moves.append((issued, index, full[:s] + (full[s] + 1,) + full[s + 1:], empty,
                          landed[:s] + (t,) + landed[s + 1:], tuple(f for f in flying if f != t), held))
        for j in range(slices):
            t = index[j] * slices + j
            s = t % stages
            if index[j] == per_slice or full[s] % 2 == (t // stages) % 2:
                continue
            if landed[s] != t:
                return "wrong data"
            mine, releases = held[j] + (t,), list(empty)
            while len(mine) > in_flight:
                releases[mine[0] % stages] += 1
                mine = mine[1:]
            moves.append((issued, index[:j] + (index[j] + 1,) + index[j + 1:], full, tuple(releases), landed,
                          flying, held[:j] + (mine,) + held[j + 1:]))
        if not moves and any(i < per_slice for i in index):
            return "deadlock"
        stack.extend(moves)
    return "ok"


def test_the_failures_seen_on_an_h100_are_the_models():
    assert explore(2, 2, 1) == "deadlock"  # every such trial hung until killed
    assert explore(3, 2, 0) == "wrong data"  # a fault or a hang, in every run
    assert explore(3, 2, 0, in_order=True) == "ok"  # the stage shared by slices needs copies landing out of order
    assert explore(4, 2, 1) == explore(14, 1, 1) == "ok"


@pytest.mark.parametrize("slices", [1, 2])
def test_the_rules_admit_exactly_the_pipelines_without_a_bad_interleaving(slices):
    wl = parse_name(f"mm/N512K{TILES * 64}M1024_f16")
    rules = KernelRules(wl, wgmma, target_of("sm_90"))
    for stages in range(2, 9):
        for in_flight in (0, 1):
            config = {"rows": 64, "cols": 64, "stages": stages, "in_flight": in_flight, "producer": 1, "cluster": 1,
                      "split": 1, "slices": slices, "epilogue": 1}
            assert (explore(stages, slices, in_flight) == "ok") == (not rules.problems(config)), config
