"""The tuners an experiment can run, with the classArgs the generated configs give them.

One registry for the experiment writer (experiments/write.py) and the benchmark driver
(benchmarks/driver.py): the suite's tuners search the native space, NNI's built-ins its
standard-type twin.
"""
from __future__ import annotations

from typing import Any

MAX_TRIALS = 512  # the original study's budget
CONCURRENCY = 4  # builds overlap; the measuring service times one kernel per device at a time

TUNERS: dict[str, dict[str, Any]] = {
    "opevo": {"className": "tuners.opevo.OpEvoTuner",
              "classArgs": {"optimize_mode": "maximize", "parents_size": 8, "offspring_size": 8,
                            "mutate_rate": 0.3, "selection": "rank", "screen": 32, "sampling": "nearest"}},
    "gbfs": {"className": "tuners.gbfs.GBFSTuner",
             "classArgs": {"optimize_mode": "maximize", "num_samples": 5, "start_size": 16,
                           "sampling": "nearest"}},
    "na2c": {"className": "tuners.na2c.NA2CTuner",
             "classArgs": {"optimize_mode": "maximize", "n_states": 8, "n_steps": 4, "hidden_size": 64,
                           "lr": 0.01, "sampling": "nearest"}},
}


def class_args(tuner: str, concurrency: int) -> dict[str, Any]:
    """The classArgs of the suite's `tuner` for an experiment with `concurrency` trials in flight: OpEvo
    breeds at least that many offspring at once, since it keeps no more than `offspring_size` in flight."""
    args = dict(TUNERS[tuner]["classArgs"])
    if "offspring_size" in args:
        args["offspring_size"] = max(args["offspring_size"], concurrency)
    return args


BUILTIN_TUNERS: dict[str, dict[str, Any]] = {  # NNI's tuners, over the twin space
    "tpe": {"className": "tuners.tpe.TPETuner", "classArgs": {"optimize_mode": "maximize"}},
    "random": {"name": "Random"},
    "evolution": {"name": "Evolution", "classArgs": {"optimize_mode": "maximize", "population_size": 32}},
}
