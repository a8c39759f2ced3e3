"""The device rules a tuner keeps (classArg `target`): the tuned template's rules on that device.

The tuner runs in NNI's dispatcher, which holds no device, so the device comes from the experiment's
config: an architecture of trial/archs.py, a device's description as the experiment writer records
it, or 'auto', which asks this machine's measuring service which device trials use here.
"""
from __future__ import annotations

import os
from typing import Any

from searchspace import SearchSpace
from searchspace.param import shown
from trial import templates
from trial.archs import ARCHS, target_of
from trial.constraints import KernelRules
from trial.measure import device
from trial.target import Target
from trial.workload import SpecError, parse_name


class TargetRules:
    """Rules of `workload`'s template on `target`; `of(space)` checks the space is the template's."""

    def __init__(self, workload: str, target: str | dict[str, Any]) -> None:
        try:
            self.wl = parse_name(workload)
        except SpecError as err:
            raise ValueError(f"workload must be op/spec, e.g. mm/N512K1024M1024, got {shown(workload)}: {err}") from None
        if isinstance(target, dict):
            try:
                self._target: Target | None = Target.from_description(target)
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"target is not a device description ({err!r}): {shown(target)}") from None
        elif target == "auto":
            self._target = None
        elif target in ARCHS:
            self._target = target_of(target)
        else:
            raise ValueError(f"target must be 'auto', one of {', '.join(ARCHS)} or a device description, "
                             f"got {shown(target)}")

    @property
    def target(self) -> Target:
        if self._target is None:
            self._target = device(os.environ.get("OPEVO_TARGET", "auto"))
        return self._target

    def of(self, space: SearchSpace) -> KernelRules:
        template = templates.with_knobs(self.wl, space.names)
        if template is None:
            expected = " or ".join(f"({', '.join(t.search_space(self.wl))})" for t in templates.candidates(self.wl))
            raise ValueError(f"with target, the search space must be {self.wl.name}'s template's "
                             f"{expected}, got {', '.join(space.names)}")
        return KernelRules(self.wl, template, self.target)
