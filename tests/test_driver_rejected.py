"""Kernels that break the device's rules, proposed by NNI's tuners over the twin space: answered to the tuner,
not counted against the run's budget, so every tuner is compared on as many kernels that run."""
from benchmarks import driver
from searchspace import from_twin, twin_space
from trial.results import MeasureResult

SPACE = {"a": {"_type": "choice", "_value": list(range(1, 41))},
         "b": {"_type": "discrete", "_value": [1, 2, 4, 8]}}


def measure_with_rules(params):
    """A device on which only a multiple of 4 for `a` runs (3 proposals in 4 break its rules)."""
    config = from_twin(SPACE, params)
    if config["a"] % 4:
        return MeasureResult("invalid", "a must be a multiple of 4 here", params=config)
    return MeasureResult("ok", params=config, gflops=float(config["a"] * config["b"]), latency_ms=1.0,
                         target="llvm", device="fake")


def test_nni_random_gets_its_budget_of_kernels_that_run():
    tuner, twin = driver.make_tuner("random", seed=3)
    answered, real = [], tuner.receive_trial_result

    def receive(parameter_id, parameters, value, **kwargs):
        answered.append(value)
        real(parameter_id, parameters, value, **kwargs)

    tuner.receive_trial_result = receive
    run = driver.drive(tuner, twin_space(SPACE), trials=12, workers=3, evaluate=measure_with_rules)
    assert twin and run.ended == "budget" and len(run.trials) == 12
    assert all(t.result.status == "ok" for t in run.trials) and [t.index for t in run.trials] == list(range(1, 13))
    assert run.rejected > 0 and len(answered) == 12 + run.rejected  # the rejected ones went back to the tuner
    assert sum(1 for value in answered if value["status"] == "invalid") == run.rejected


def test_a_tuner_that_proposes_nothing_that_runs_ends_after_its_rejections():
    tuner, _ = driver.make_tuner("random", seed=1)
    run = driver.drive(tuner, twin_space(SPACE), trials=2, workers=2,
                       evaluate=lambda params: MeasureResult("invalid", "too big for this device", params=params))
    assert run.ended == "rejected" and run.trials == []
    assert driver.REJECTED_PER_TRIAL * 2 <= run.rejected < driver.REJECTED_PER_TRIAL * 2 + 2  # at most those in flight
