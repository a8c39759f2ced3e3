"""Which task gets the next round of trials: Ansor's gradient task scheduler, on the model's time.

Follows `TaskScheduler` of Ansor (apache/tvm v0.12, python/tvm/auto_scheduler/task_scheduler.py;
L. Zheng et al., "Ansor", OSDI 2020, section 6): after a warm-up round of every task, each next round
goes to the task whose gradient

    grad_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i)

is the most negative, where w_i is d(model time)/d(per-call time of task i) (its calls per forward:
the objective is sum_i count_i * cost_i, Ansor's weighted sum), backward_i is the task's recent
improvement, (cost after its last round - cost `window` rounds before) / window, and forward_i the
optimistic next step, cost_i / rounds_i less (Ansor's g_next_1 - g_i).  So w_i * cost_i, the task's
time in the model, weighs the expected gain, and the gradient is in the model's milliseconds.

Where this departs from Ansor:
- `cost_i` is the per-call time the model would have with the tuned kernel applied, i.e. the lower of
  the measured time in the model (the vendor kernel) and the best tuned latency, not Ansor's own
  schedule's latency with a 1e10 placeholder: applying keeps the faster kernel, so that is what a
  round can gain, and a task without a verified kernel weighs its time in the model, not infinity.
- Ansor's similarity groups (g_next_2, from tasks of equal tags and FLOP counts) are left out: the
  suite's tasks of one op share a template but no shape, so there is no equal-FLOP peer to bound by.
- Ties (e.g. every task without history) go to the task with the fewest rounds, then the first,
  where Ansor draws at random: the same inputs always give the same schedule.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ALPHA = 0.2  # Ansor's alpha: the weight of the backward (observed) gradient
WINDOW = 3  # Ansor's backward_window_size, in rounds


@dataclass
class Progress:
    """One task as the scheduler sees it (kept in the manifest, so a resumed run schedules the same)."""

    weight: float  # calls per forward: d(model ms) / d(per-call ms)
    cost_ms: float  # per-call time in the model now: min(measured vendor time, best tuned latency)
    rounds: int = 0  # rounds this task has had (Ansor's task_cts)
    history: list[float] = field(default_factory=list)  # cost_ms after each round (task_costs_history)
    dead: bool = False  # a round measured nothing more (Ansor's dead_tasks): never picked again

    def record(self, cost_ms: float, measured: int) -> None:
        """The outcome of one round: the per-call cost it left and how many trials it measured."""
        self.cost_ms = min(self.cost_ms, cost_ms)
        self.rounds += 1
        self.history.append(self.cost_ms)
        self.dead = self.dead or measured == 0


def gradient(p: Progress, alpha: float = ALPHA, window: int = WINDOW) -> float:
    """Ansor's gradient of the model's time for one more round of this task (<= 0; model ms per round)."""
    if p.dead:
        return 0.0
    t = p.rounds
    backward = (p.history[t - 1] - p.history[t - 1 - window]) / window if t - 1 - window >= 0 else 0.0
    forward = -p.cost_ms / t  # (cost - cost / t) - cost
    return p.weight * (alpha * backward + (1 - alpha) * forward)


def pick(tasks: list[Progress], alpha: float = ALPHA, window: int = WINDOW) -> int | None:
    """The index of the task to tune next, or None when every task is dead.

    Warm-up first: the first live task that has had no round; then the most negative gradient.
    """
    live = [i for i, p in enumerate(tasks) if not p.dead]
    if not live:
        return None
    for i in live:
        if tasks[i].rounds == 0:
            return i
    grads = {i: gradient(tasks[i], alpha, window) for i in live}
    return min(live, key=lambda i: (grads[i], tasks[i].rounds, i))
