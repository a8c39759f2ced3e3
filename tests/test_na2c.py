"""NA2CTuner: its hand-written gradients, update rule, walkers, and runs through the NNI 3.0 API."""
from __future__ import annotations

import copy
import statistics
from typing import Any

import nni
import numpy as np
import pytest
import tuner_harness as h
import tuner_scenarios as sc
from tuner_harness import CONV, MM, SPACES, FakeNNI, is_neighbour, keys, objective, ok
from tuner_harness import no_checkpoint_dir  # noqa: F401 - the fixture applies here too

from tuners.a2c import GAMMA, MLP, Adam, a2c_update, log_prob_grad, policy, value_grad
from tuners.na2c import NA2CTuner
from searchspace import Config, SearchSpace


def make_tuner(space: dict = MM, **kwargs: Any) -> NA2CTuner:
    return h.make_tuner(NA2CTuner, space, **kwargs)


# ---- networks and gradients ----------------------------------------------------------------------------

def numeric_grad(f, params: dict[str, np.ndarray], eps: float = 1e-6) -> dict[str, np.ndarray]:
    out = {}
    for k, p in params.items():
        g = np.zeros_like(p)
        for i in np.ndindex(p.shape):
            old = p[i]
            p[i] = old + eps
            up = f()
            p[i] = old - eps
            down = f()
            p[i] = old
            g[i] = (up - down) / (2 * eps)
        out[k] = g
    return out


def assert_close(analytic: dict[str, np.ndarray], numeric: dict[str, np.ndarray]) -> None:
    assert analytic.keys() == numeric.keys()
    for k in analytic:
        assert analytic[k].shape == numeric[k].shape
        np.testing.assert_allclose(analytic[k], numeric[k], rtol=1e-5, atol=1e-8, err_msg=k)


def test_log_prob_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    actor = MLP(5, 7, 6, rng)
    for p in actor.params.values():
        p += rng.normal(0, 0.5, p.shape)  # non-zero biases, a sharper policy
    x = rng.random(5)
    mask = np.array([True, False, True, True, False, True])
    for action in (0, 3, 5):
        logp, grads = log_prob_grad(actor, x, mask, action)
        assert logp == pytest.approx(np.log(policy(actor, x, mask)[0][action]))
        assert_close(grads, numeric_grad(lambda: log_prob_grad(actor, x, mask, action)[0], actor.params))
        # Masked actions have probability 0, so their output weights cannot matter.
        assert not grads["W2"][~mask].any() and not grads["b2"][~mask].any()


def test_value_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(1)
    critic = MLP(4, 5, 1, rng)
    x, target = rng.random(4), 0.7

    def loss() -> float:
        return 0.5 * (value_grad(critic, x, target)[0] - target) ** 2

    value, grads = value_grad(critic, x, target)
    assert value == pytest.approx(float(critic.forward(x)[0][0]))
    assert_close(grads, numeric_grad(loss, critic.params))


def test_policy_is_a_masked_softmax() -> None:
    actor = MLP(3, 4, 5, np.random.default_rng(2))
    mask = np.array([False, True, True, False, True])
    probs, _ = policy(actor, np.ones(3), mask)
    assert probs.sum() == pytest.approx(1.0)
    assert (probs[~mask] == 0).all() and (probs[mask] > 0).all()


@pytest.mark.parametrize("reward", [2.0, -2.0])
def test_a2c_update_ascends_the_advantage(reward: float) -> None:
    rng = np.random.default_rng(3)
    actor, critic = MLP(4, 8, 5, rng), MLP(4, 8, 1, rng)
    actor_opt, critic_opt = Adam(actor.params, 0.01), Adam(critic.params, 0.01)
    x, x_next, mask, action = rng.random(4), rng.random(4), np.array([True, True, False, True, True]), 3
    before = copy.deepcopy(actor)
    p_before = policy(actor, x, mask)[0][action]
    target = reward + GAMMA * float(critic.forward(x_next)[0][0])
    error_before = abs(float(critic.forward(x)[0][0]) - target)

    advantage = a2c_update(actor, critic, actor_opt, critic_opt, x, mask, action, reward, x_next)

    assert np.sign(advantage) == np.sign(reward)
    p_after = policy(actor, x, mask)[0][action]
    assert (p_after > p_before) if reward > 0 else (p_after < p_before)
    assert abs(float(critic.forward(x)[0][0]) - target) < error_before
    # The actor took exactly one Adam step along advantage·∇log π, the advantage being a constant.
    _, grads = log_prob_grad(before, x, mask, action)
    Adam(before.params, 0.01).descend(before.params, {k: -advantage * g for k, g in grads.items()})
    for k in actor.params:
        np.testing.assert_allclose(actor.params[k], before.params[k])


def test_a2c_update_at_the_end_of_a_walk_targets_the_reward() -> None:
    rng = np.random.default_rng(4)
    actor, critic = MLP(4, 8, 5, rng), MLP(4, 8, 1, rng)
    x, mask = rng.random(4), np.ones(5, dtype=bool)
    value = float(critic.forward(x)[0][0])
    advantage = a2c_update(actor, critic, Adam(actor.params, 0.01), Adam(critic.params, 0.01), x, mask, 1, 0.0, None)
    assert advantage == pytest.approx(0.0 - value)


def test_hidden_size_is_used() -> None:
    tuner = make_tuner(CONV, hidden_size=17, seed=0)
    tuner.generate_multiple_parameters([0])
    space = SearchSpace.from_json(CONV)
    assert tuner.actor is not None and tuner.critic is not None
    assert tuner.actor.params["W1"].shape == (17, space.encode_width)
    assert tuner.actor.params["W2"].shape == (len(space.moves()), 17)
    assert tuner.critic.params["W2"].shape == (1, 17)


# ---- walkers -------------------------------------------------------------------------------------------

def test_walkers_start_at_random_configs_then_move_to_neighbours() -> None:
    space = SearchSpace.from_json(CONV)
    tuner = make_tuner(CONV, n_states=4, seed=1)
    starts = tuner.generate_multiple_parameters([0, 1, 2, 3])
    steps = tuner.generate_multiple_parameters([4, 5, 6, 7])
    assert len(set(keys(CONV, starts + steps))) == 8
    assert all(is_neighbour(space, a, b) for a, b in zip(starts, steps))


@pytest.mark.parametrize("mode", ["maximize", "minimize"])
def test_walk_climbs_and_restarts_from_the_best(mode: str) -> None:
    # One walker, one trial at a time, so every result is known by the walker's next move.
    space, f = SearchSpace.from_json(MM), objective(MM)
    metric = f if mode == "maximize" else (lambda c: 1.0 / f(c))  # GFLOPS or seconds: same best
    tuner = make_tuner(MM, optimize_mode=mode, n_states=1, n_steps=3, seed=5)
    run = FakeNNI(tuner, lambda c: ok(metric(c)), concurrency=1).run(9)
    p = run.proposed
    at = p[0]
    for i in (1, 2, 3):
        assert is_neighbour(space, at, p[i])
        at = p[i] if f(p[i]) >= f(at) else at  # a worse move is undone
    assert is_neighbour(space, max(p[:4], key=f), p[4])  # a new episode from the best so far
    assert len(set(keys(MM, p))) == 9


def test_failed_move_is_undone() -> None:
    space = SearchSpace.from_json(MM)
    tuner = make_tuner(MM, n_states=1, seed=2)
    (start,) = tuner.generate_multiple_parameters([0])
    tuner.receive_trial_result(0, start, ok(5.0))
    (move,) = tuner.generate_multiple_parameters([1])
    tuner.receive_trial_result(1, move, h.INVALID)
    (again,) = tuner.generate_multiple_parameters([2])
    assert is_neighbour(space, start, move) and is_neighbour(space, start, again)


def test_walker_on_a_failure_restarts_from_the_best() -> None:
    space = SearchSpace.from_json(MM)
    tuner = make_tuner(MM, n_states=2, seed=3)
    good, bad = tuner.generate_multiple_parameters([0, 1])
    tuner.receive_trial_result(0, good, ok(5.0))
    tuner.receive_trial_result(1, bad, h.INVALID)
    step, restart = tuner.generate_multiple_parameters([2, 3])
    assert is_neighbour(space, good, step)
    assert is_neighbour(space, good, restart) and not is_neighbour(space, bad, restart)


def test_walkers_never_walk_on_from_failures() -> None:
    # Nothing succeeds and every result is known by the walker's next turn: every proposal is a restart.
    space = SearchSpace.from_json(MM)
    run = FakeNNI(make_tuner(MM, seed=1), lambda c: dict(h.INVALID), concurrency=1).run(40)
    assert not any(is_neighbour(space, a, b) for i, b in enumerate(run.proposed) for a in run.proposed[:i])


# ---- behaviour as an optimiser ---------------------------------------------------------------------

@pytest.mark.parametrize("name", SPACES)
def test_beats_random_search_maximizing(name: str) -> None:
    h.assert_beats_random(NA2CTuner, SPACES[name], objective(SPACES[name]), 2)


@pytest.mark.parametrize("name", ["mm", "conv"])
def test_beats_random_search_minimizing(name: str) -> None:
    h.assert_beats_random(NA2CTuner, SPACES[name], objective(SPACES[name]), 2, optimize_mode="minimize")


def test_constrained_space() -> None:
    # Most of the space is beyond the device's limits: walkers that restart from successes stay valid.
    sc.assert_valid_and_better(NA2CTuner, 3)


def test_learning_helps() -> None:
    # The same walkers with a policy that cannot learn (a vanishing step size) do markedly worse.
    space, f = SPACES["bmm"], objective(SPACES["bmm"])
    budget, seeds = 150, range(5)

    def best(lr: float) -> float:
        return statistics.mean(max(FakeNNI(make_tuner(space, lr=lr, seed=s), lambda c: ok(f(c)),
                                           order_seed=s).run(budget).values) for s in seeds)

    assert best(0.01) > 1.5 * best(1e-12)


def test_same_seed_same_run() -> None:
    f = objective(MM)

    def run(seed: int) -> list[Config]:
        return FakeNNI(make_tuner(MM, seed=seed), lambda c: ok(f(c)), order_seed=5).run(60).proposed

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_failed_trials_are_tolerated() -> None:
    tuner = make_tuner(MM, seed=4)
    run = FakeNNI(tuner, h.failing(objective(MM), crash=lambda c: c["unroll"] == 1500), order_seed=2).run(200)
    assert len(set(keys(MM, run.proposed))) == len(run.proposed) == 200
    failed = [c for c, v in tuner.history() if v is None]
    assert any(c["vec"] == 4 for c in failed) and any(c["unroll"] == 1500 for c in failed)
    assert len(tuner.measured()) == len(run.values) == 200 - len(failed)
    # Failures are never restart points, whatever metric they claim.
    best = tuner.best()
    assert best is not None and best[0]["vec"] != 4 and best[1] == max(run.values)


# ---- warm start --------------------------------------------------------------------------------------

def test_warm_start(tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    sc.assert_warm_start(NA2CTuner, tmp_path, monkeypatch, caplog)


def test_walkers_start_at_the_warm_start_configs(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    sc.recorded_store(tmp_path, monkeypatch)
    tuner = sc.warm_tuner(NA2CTuner, n_states=3)
    proposed = tuner.generate_multiple_parameters(list(range(6)))
    space = SearchSpace.from_json(MM)
    assert proposed[:2] == [sc.PEAK, sc.SECOND]
    assert is_neighbour(space, sc.PEAK, proposed[2]) and is_neighbour(space, sc.SECOND, proposed[3])
    assert not any(is_neighbour(space, c, proposed[4]) for c in proposed[:4])  # the third walker: random
    assert is_neighbour(space, proposed[2], proposed[5])


# ---- NNI protocol ----------------------------------------------------------------------------------

def test_tiny_space_is_exhausted_after_each_config_once() -> None:
    h.assert_exhausts_tiny(NA2CTuner, concurrency=3, n_states=3, n_steps=4)


def test_exhaustion_while_trials_are_in_flight() -> None:
    tuner = make_tuner({"v": {"_type": "discrete", "_value": [1, 2, 3, 4]}}, n_states=2)
    assert len(tuner.generate_multiple_parameters(list(range(6)))) == 4
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(6)


@pytest.mark.parametrize("kwargs, name", [
    ({"optimize_mode": "minimise"}, "optimize_mode"),
    ({"n_states": 0}, "n_states"),
    ({"n_states": 1.5}, "n_states"),
    ({"n_steps": -2}, "n_steps"),
    ({"n_steps": True}, "n_steps"),
    ({"hidden_size": 0}, "hidden_size"),
    ({"hidden_size": "64"}, "hidden_size"),
    ({"lr": 0}, "lr"),
    ({"lr": float("inf")}, "lr"),
    ({"lr": "0.01"}, "lr"),
    ({"epsilon": -0.1}, "epsilon"),
    ({"epsilon": 1.5}, "epsilon"),
    ({"epsilon": None}, "epsilon"),
    ({"seed": "1"}, "seed"),
    *sc.BAD_COMMON_ARGS,
])
def test_bad_class_args(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        NA2CTuner(**kwargs)
