"""`ConstrainedSpace`: a search space whose configurations must also keep rules beyond their parameters'
own values, such as a GPU's limits on threads, shared memory and registers per block.

Most of a GPU kernel's factor space breaks such rules (for sm_90, 8.8 % of uniform samples of
mm/N512K1024M1024's space keep them), so a tuner that samples or walks the plain space spends most of
its budget on kernels that cannot run.  Here every configuration a tuner gets from the space keeps the
rules: samples, neighbours, repaired offspring and enumerations.

The rules come as a `Constraints` object (the trial's templates declare them, trial/constraints.py);
the space only needs, for any configuration, how far it is beyond the rules (`excess`, 0 when all
hold) and why (`problems`), and which parameter values no valid configuration can take (`possible`).

Sampling is uniform over the valid configurations: a draw from the parameters' pruned domains (values
that some valid configuration takes, `domains`) is kept if it is valid, which is exactly uniform.  Where valid
configurations are too rare for that (after `REJECTION_TRIES` draws), the last draw is repaired (the
nearest valid configuration, by descent on the excess) and then moved by a Metropolis-Hastings walk
over valid neighbours, whose stationary distribution is uniform; `WALK_STEPS` steps spread the
samples away from where the repair lands, so the result is close to uniform, not exact.

`sample_nearest` is the other distribution: one draw from the pruned domains, repaired.  Most draws
break a rule, so most samples land where a rule is nearly at its limit (the most threads, shared
memory or registers a block may have), which is where a GPU's fast kernels are found more often.
"""
from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from .condition import Condition
from .errors import SpaceError
from .param import Parameter, copied
from .space import Config, SearchSpace

REJECTION_TRIES = 64
WALK_STEPS = 12
REPAIR_STEPS = 400
COUNT_LIMIT = 1 << 16  # configurations checked one by one to count the valid ones
DEGREES_KEPT = 1 << 16  # valid-neighbour counts remembered for the walk
EXCESS_KEPT = 1 << 17  # excesses remembered (a repair scores every neighbour of each step)


class Constraints(Protocol):
    """Rules a configuration must keep beyond its parameters' values."""

    def excess(self, config: Config) -> float:
        """0 when every rule holds; otherwise positive, larger the further beyond its limits `config` is."""

    def problems(self, config: Config) -> list[str]:
        """One message per broken rule."""

    def possible(self, name: str, value: Any) -> bool:
        """False only if no valid configuration has `value` for parameter `name` (True when unsure)."""


class ConstrainedSpace(SearchSpace):
    """The parameters of a `SearchSpace` and `Constraints` on whole configurations.

    `validate`, `contains` and `key` stay about the parameters' values alone (a tuner must still key
    and recognise configurations measured before, valid or not); `valid` and `violations` add the
    rules, and `sample`, `neighbours`, `values` and `repair` yield only valid configurations.
    """

    def __init__(self, params: list[Parameter], constraints: Constraints,
                 conditions: Mapping[str, Condition] | None = None) -> None:
        super().__init__(params, conditions)
        self.constraints = constraints
        self._domains: dict[str, list[Any] | None] | None = None
        self._degrees: dict[tuple[Any, ...], int] = {}
        self._excesses: dict[tuple[Any, ...], float] = {}
        self._size: int | None = None

    @classmethod
    def of(cls, space: SearchSpace, constraints: Constraints) -> ConstrainedSpace:
        return cls(list(space.params.values()), constraints, space.conditions)

    @property
    def size(self) -> int:
        """Number of valid configurations where the space is small enough to count them (a tuner then knows
        when it has seen them all), else of all configurations (an upper bound)."""
        if self._size is None:
            plain = self._distinct()
            self._size = sum(1 for _ in self.values()) if plain <= COUNT_LIMIT else plain
        return self._size

    def excess(self, config: Config) -> float:
        """The constraints' excess of `config` (0 when every rule holds), remembered by its values: an
        evolutionary tuner repairs dozens of offspring a trial, scoring every neighbour of each step, and
        meets the same configurations again and again.  Keyed by every parameter's value, not by `key`, which
        validates first and folds inactive parameters into one value, where the rules may still tell them apart."""
        try:
            key = tuple([p.key(config[name]) for name, p in self._params.items()])
        except (KeyError, TypeError, ValueError):  # values outside the parameters': not remembered
            return self.constraints.excess(config)
        found = self._excesses.get(key)
        if found is None:
            if len(self._excesses) >= EXCESS_KEPT:
                self._excesses.clear()
            found = self._excesses[key] = self.constraints.excess(config)
        return found

    def violations(self, config: Config) -> list[str]:
        """Why `config` is not valid: its parameters' problems, else the rules it breaks."""
        return self.problems(config) or self.constraints.problems(config)

    def valid(self, config: Any) -> bool:
        return not self.problems(config) and self.excess(config) == 0

    def neighbours(self, config: Config) -> list[Config]:
        """The valid configurations one move away from `config` (which itself need not be valid)."""
        return [c for c in super().neighbours(config) if self.excess(c) == 0]

    def values(self) -> Iterator[Config]:
        """Every valid configuration, lazily; `ValueError` when the space has too many to list."""
        return (c for c in super().values() if self.excess(c) == 0)

    def repair(self, config: Config, rng: random.Random) -> Config:
        """A valid configuration near `config`: `config` itself (the same object, not a copy) if valid, else a
        new one reached by moving to the neighbour that is least beyond the rules, step by step (ties at
        random).  `SpaceError` when no valid configuration is found, e.g. when the device can run no kernel of
        this space."""
        current, excess = config, self.excess(config)
        for _ in range(REPAIR_STEPS):
            if excess == 0:
                return current
            scored = [(self.excess(c), rng.random(), c) for c in SearchSpace.neighbours(self, current)]
            best, _, nearest = min(scored, key=lambda s: s[:2])
            if best >= excess:  # a local minimum: step anywhere, and carry on from there
                best, _, nearest = rng.choice(scored)
            current, excess = nearest, best
        raise SpaceError(f"found no configuration that keeps the rules near {config}: "
                         f"{'; '.join(self.constraints.problems(current))}")

    def sample(self, rng: random.Random) -> Config:
        """A valid configuration drawn uniformly, or close to it (see the module's docstring)."""
        config = self._draw(rng)
        for _ in range(REJECTION_TRIES):
            if self.excess(config) == 0:
                return config
            config = self._draw(rng)
        return self._walk(self.repair(config, rng), rng, WALK_STEPS)

    def sample_nearest(self, rng: random.Random) -> Config:
        """The valid configuration nearest to a draw from the pruned domains: not uniform, mostly near the
        rules' limits (see the module's docstring)."""
        return self.repair(self._draw(rng), rng)

    def _draw(self, rng: random.Random) -> Config:
        """A configuration drawn uniformly from the pruned domains, valid or not."""
        return {name: copied(rng.choice(values)) if values is not None else self[name].sample(rng)
                for name, values in self.domains().items()}

    def _degree(self, config: Config) -> int:
        key = self.key(config)
        if len(self._degrees) > DEGREES_KEPT:
            self._degrees.clear()
        if key not in self._degrees:
            self._degrees[key] = len(self.neighbours(config))
        return self._degrees[key]

    def _walk(self, config: Config, rng: random.Random, steps: int) -> Config:
        """Metropolis-Hastings over valid neighbours: a move to `c` is taken with probability
        deg(current) / deg(c), which makes every valid configuration equally likely in the long run."""
        for _ in range(steps):
            options = self.neighbours(config)
            if not options:
                break
            proposal = rng.choice(options)
            if rng.random() * self._degree(proposal) <= len(options):
                config = proposal
        return config

    def domains(self) -> dict[str, list[Any] | None]:
        """Per parameter, the values that valid configurations may take (`Constraints.possible`), computed
        once; None for a parameter with more values than `MAX_ENUMERATION` (all of them)."""
        if self._domains is None:
            self._domains = {}
            for name, param in self.params.items():
                try:
                    values = param.values()
                except ValueError:
                    self._domains[name] = None
                    continue
                kept = [v for v in values if self.constraints.possible(name, v)]
                if not kept:
                    raise SpaceError(f"{name}: no value can keep the rules on this device")
                self._domains[name] = kept
        return self._domains
