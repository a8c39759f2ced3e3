"""N-A2C (Zhang et al., "Compiler-Level Matrix Multiplication Optimization for Deep Learning", arXiv 1909.10616).

Neighbourhood actor-critic: `n_states` walkers move over the configuration graph of `SearchSpace`, one
neighbour move per proposal. The state is the configuration's encoding (`SearchSpace.encode`); the
actions are a fixed list of moves over the whole space (`SearchSpace.moves`), so the actor, a one-hidden-layer
MLP, has one softmax output per move. A move that does not apply at a state, or that leads to a
configuration already seen (measured or in flight), is masked out, so a walker samples among its unseen
neighbours in proportion to the policy (with probability ε uniformly instead). Configurations therefore
stay integral: they are produced by the moves, never by rounding network outputs. A walker whose
neighbours were all seen jumps to a random unseen configuration. A move found (by the walker's next
turn) to have made things worse is undone before the next move, so walks climb instead of drifting.

Walkers start at random configurations (with warm start, see `tuners.base`, at the recorded ones) and,
after `n_steps` moves, restart from the best configuration measured so far. Deviation from the paper:
a walker never walks on from a configuration whose trial failed. It goes back to where it came from if
that succeeded, else restarts early, from the best success (from a random unseen configuration while
nothing has succeeded). Most of a GPU kernel's factor space is beyond the device's limits and the
neighbours of an invalid configuration are mostly invalid too, so walkers that started at random kept
walking among failures and spent the whole budget on invalid trials.

Walkers do not wait for results: the next state is known as soon as a move is proposed, and the
transition s -> s' is learned from once both ends have been measured. Its reward is q(s') − q(s), where
q is the quantile of the metric (oriented by `optimize_mode`) among all successful measurements, scaled
to [-1, 1], and `FAILURE_QUALITY` for a failed trial. Ranks make the reward scale-free and robust to the
heavy tails of run times; the difference is the improvement a move brings, so the actor learns which
moves help from where, not merely which regions are good. The critic V is fitted to the one-step target
y = r + GAMMA·V(next), and the actor ascends A·∇log π(a|s) with the advantage A = y − V(s) held
constant. The next state is the one the walker goes on from: s' after a move that did not make things
worse, s after one that did (it is undone); after a move from a failure into a failure the walker
restarts elsewhere, so the walk ends there and y = r. Both networks are numpy MLPs with hand-written
gradients (`tuners.a2c`), trained by Adam one transition at a time. The networks and walkers are not checkpointed: on
resume they start afresh, with the restored measurements marked seen and counted in the ranks.
"""
from __future__ import annotations

import bisect
import copy
import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from searchspace import Config, Move, SearchSpace

from .a2c import MLP, Adam, a2c_update, policy
from .base import SpaceTuner
from .classargs import number_in, positive_int

FAILURE_QUALITY = -1.5
"""Quality of a configuration whose trial failed: successes range over [-1, 1], a failure ranks below them all."""


@dataclass
class _Walker:
    state: Config | None = None
    previous: Config | None = None
    steps: int = 0


@dataclass
class _Transition:
    source: Hashable
    dest: Hashable
    x: np.ndarray
    x_next: np.ndarray
    mask: np.ndarray
    action: int


@dataclass
class _Ranks:
    """The successful scores, sorted."""

    scores: list[float] = field(default_factory=list)
    keys: set[Hashable] = field(default_factory=set)

    def add(self, key: Hashable, score: float) -> None:
        if key in self.keys:
            return
        self.keys.add(key)
        bisect.insort(self.scores, score)

    def quality(self, score: float) -> float:
        """The score's quantile among the successes, scaled to [-1, 1] (ties count half)."""
        if not self.scores:
            return 0.0
        below = bisect.bisect_left(self.scores, score)
        not_above = bisect.bisect_right(self.scores, score)
        return (below + not_above) / len(self.scores) - 1.0


class NA2CTuner(SpaceTuner):
    """N-A2C as an NNI tuner.

    classArgs:
        optimize_mode: 'maximize' (e.g. GFLOPS, the default) or 'minimize' (e.g. seconds).
        n_states: number of parallel walkers (8).
        n_steps: moves per walker before it restarts from the best configuration (16).
        hidden_size: hidden units of the actor and of the critic (64).
        lr: Adam step size of both networks (0.01).
        epsilon: probability of a uniformly random move instead of one drawn from the policy (0.1).
        seed: seed of the tuner's random generators, for reproducible runs (None).
        warm_start, workload, device, warm_size: warm start from the records (see `SpaceTuner`); the
            walkers' first episodes start at the recorded configurations.
    """

    def __init__(self, optimize_mode: str = "maximize", n_states: int = 8, n_steps: int = 16,
                 hidden_size: int = 64, lr: float = 0.01, epsilon: float = 0.1, seed: int | None = None,
                 **warm: Any) -> None:
        super().__init__(optimize_mode=optimize_mode, seed=seed, **warm)
        self.n_states = positive_int("n_states", n_states, most=1024)
        self.n_steps = positive_int("n_steps", n_steps)
        self.hidden_size = positive_int("hidden_size", hidden_size, most=4096)
        self.lr = number_in("lr", lr, 0, math.inf, open_low=True, open_high=True)
        self.epsilon = number_in("epsilon", epsilon, 0, 1)
        self._model_space: SearchSpace | None = None
        self.moves: list[Move] = []
        self.actor: MLP | None = None
        self.critic: MLP | None = None
        self._actor_opt: Adam | None = None
        self._critic_opt: Adam | None = None
        self._walkers: list[_Walker] = []
        self._starts: list[Config] = []
        self._turn = 0
        self._transitions: dict[Hashable, _Transition] = {}
        self._waiting: dict[Hashable, list[_Transition]] = {}
        self._outcomes: dict[Hashable, float | None] = {}
        self._ranks = _Ranks()

    def propose(self) -> Config:
        """The next walker's next move, after it (re)starts if it has no state, failed, or ended its episode."""
        self._sync()
        walker = self._walkers[self._turn]
        self._turn = (self._turn + 1) % len(self._walkers)
        if walker.state is None:
            start = self._warm_start()
        elif walker.steps >= self.n_steps or not self._retreat(walker):
            best = self.best()
            start = best[0] if best else None
        else:
            return self._step(walker)
        walker.steps, walker.previous = 0, None
        if start is None:
            walker.state = self.random_unseen()
            return walker.state
        walker.state = start
        return self._step(walker)

    def observe(self, config: Config, value: float | None) -> None:
        """Learn from the transitions into and out of `config` whose both ends are now measured."""
        self._sync()
        assert self.space is not None
        key = self.space.key(config)
        self._outcomes[key] = None if value is None else self.score(value)
        if value is not None:
            self._ranks.add(key, self.score(value))
        ready = self._waiting.pop(key, [])
        transition = self._transitions.pop(key, None)
        if transition is not None:
            if transition.source in self._outcomes:
                ready.append(transition)
            else:
                self._waiting.setdefault(transition.source, []).append(transition)
        for t in ready:
            self._learn(t)

    def _quality(self, key: Hashable) -> float:
        score = self._outcomes[key]
        return FAILURE_QUALITY if score is None else self._ranks.quality(score)

    def _learn(self, t: _Transition) -> None:
        """Train both networks on t: s -> s', rewarded by the improvement q(s') − q(s).

        The next state is where the walker goes on from (see `_retreat`): s' unless the move made things
        worse (then s), and none when both ends failed (the walker restarts elsewhere).
        """
        assert self.actor is not None and self.critic is not None
        assert self._actor_opt is not None and self._critic_opt is not None
        reward = self._quality(t.dest) - self._quality(t.source)
        if reward < 0:
            x_after = t.x
        elif self._outcomes[t.dest] is None:
            x_after = None
        else:
            x_after = t.x_next
        a2c_update(self.actor, self.critic, self._actor_opt, self._critic_opt, t.x, t.mask, t.action, reward,
                   x_after)

    def _retreat(self, walker: _Walker) -> bool:
        """Undo the walker's last move if it is known to have made things worse; False if it must restart.

        A failure ranks below every success, so a failed move from a success is undone; a walker left on
        a failure (its start, or a move from a state not measured yet) has nowhere to go on from.
        """
        assert walker.state is not None
        if walker.previous is not None and self._worse(walker.state, walker.previous):
            walker.state = walker.previous
        return not self._failed(walker.state)

    def _warm_start(self) -> Config | None:
        """Where a walker's first walk starts: a warm-start configuration no walker took yet, else None."""
        while self._starts:
            config = self._starts.pop(0)
            if not self._failed(config):
                return config
        return None

    def _step(self, walker: _Walker) -> Config:
        """Move `walker` to an unseen neighbour drawn from the policy (or ε-uniformly); record the transition."""
        assert self.space is not None and self.actor is not None and walker.state is not None
        state = walker.state
        walker.steps += 1
        targets = [self.space.moved(state, move) for move in self.moves]
        mask = np.array([t is not None and self.space.valid(t) and not self.is_seen(t) for t in targets])
        if not mask.any():
            walker.previous, walker.state = None, self.random_unseen()
            return walker.state
        x = self._encode(state)
        allowed = np.flatnonzero(mask).tolist()
        if self.rng.random() < self.epsilon:
            action = self.rng.choice(allowed)
        else:
            probs, _ = policy(self.actor, x, mask)
            action = self.rng.choices(allowed, weights=probs[allowed].tolist())[0]
        config = targets[action]
        self._transitions[self.space.key(config)] = _Transition(
            self.space.key(state), self.space.key(config), x, self._encode(config), mask, action)
        walker.previous, walker.state = state, config
        return config

    def _failed(self, config: Config) -> bool:
        """Whether `config` was measured and its trial failed."""
        assert self.space is not None
        key = self.space.key(config)
        return key in self._outcomes and self._outcomes[key] is None

    def _worse(self, config: Config, than: Config) -> bool:
        """Whether both are measured and `config` ranks below `than` (a failure ranks below every success)."""
        assert self.space is not None
        a, b = self.space.key(config), self.space.key(than)
        return a in self._outcomes and b in self._outcomes and self._quality(a) < self._quality(b)

    def _encode(self, config: Config) -> np.ndarray:
        assert self.space is not None
        return np.array(self.space.encode(config))

    def _sync(self) -> None:
        """(Re)build the moves, networks and walkers when the search space was (re)set."""
        assert self.space is not None
        if self._model_space is self.space:
            return
        self._model_space = self.space
        self.moves = self.space.moves()
        rng = np.random.default_rng(self.rng.getrandbits(64))
        width, n_moves = self.space.encode_width, len(self.moves)
        # A small actor output layer starts the policy near uniform over the allowed moves.
        self.actor = MLP(width, self.hidden_size, n_moves, rng, out_scale=0.1)
        self.critic = MLP(width, self.hidden_size, 1, rng)
        self._actor_opt = Adam(self.actor.params, self.lr)
        self._critic_opt = Adam(self.critic.params, self.lr)
        self._walkers = [_Walker() for _ in range(self.n_states)]
        self._starts = copy.deepcopy(self.warm_configs)
        self._turn = 0
        self._transitions = {}
        self._waiting = {}
        self._outcomes = {}
        self._ranks = _Ranks()
        for config, value in self.history():
            key = self.space.key(config)
            self._outcomes[key] = None if value is None else self.score(value)
            if value is not None:
                self._ranks.add(key, self.score(value))
