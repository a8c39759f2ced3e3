"""Warm start: the best verified configurations of a workload on a device, from the records store.

They are proposed before anything the algorithm proposes, best first, and measured again rather than
trusted, since the kernel, the device's state or the trial may have changed since; the algorithm then
builds on their results like on any others.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
from typing import Any

from searchspace import Config, SearchSpace
from trial.measure import this_device
from trial.records import Records, as_template_takes, default_path
from trial.workload import parse_name

_logger = logging.getLogger(__name__)


def recorded_best(workload_key: str, device: str | None, n: int, space: SearchSpace) -> list[Config]:
    """The `n` best verified configurations of the workload on `device` that `space` holds as valid, as
    recorded or as the op's template takes them now (`as_template_takes`: records outlive knob changes).

    Empty, with the reason logged, when the store is missing, unreadable or holds none: the run then
    starts cold. `device` None is the device trials use here, asked of the measuring service only when
    the workload has records at all.
    """
    path = default_path()
    if not path.exists():
        _logger.info("warm start: no records store at %s; starting cold", path)
        return []
    try:
        store = Records(path)
        if not store.best(workload_key):
            _logger.info("warm start: no verified record of %s in %s; starting cold", workload_key, path)
            return []
        if device is None:
            device = this_device(os.environ.get("OPEVO_TARGET", "auto"))
        takes = as_template_takes(parse_name(workload_key))

        def fits(params: Any) -> Config | None:
            if space.valid(params):  # as recorded: the space need not be a template's
                return params
            upgraded = takes(params)
            return upgraded if upgraded is not None and space.valid(upgraded) else None

        found = store.best(workload_key, device, n=n, fits=fits)
    except (sqlite3.Error, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        _logger.warning("warm start: cannot read the records of %s in %s (%s); starting cold", workload_key, path, e)
        return []
    _logger.info("warm start: %d recorded configurations of %s on %s that fit the search space",
                 len(found), workload_key, device)
    return [r.params for r in found]
