"""One round of a task's NNI experiment (experiments/model/rounds.py), with nnictl and NNI's REST API faked."""
import pytest
from nni_experiment import free_port

from experiments.model import rounds
from trial.workload import parse_name


@pytest.mark.parametrize("fails", ["create", "started", "trials", "resume"])
def test_a_round_that_fails_stops_its_experiment(tmp_path, monkeypatch, fails):
    """Once the experiment has an id, a failure anywhere in the round (the REST call after create or
    resume, the manifest's save in `started`) stops it; a create that gave no id has nothing to stop."""
    stopped = []

    def failing(name, value=None):
        def call(*args, **kwargs):
            if name == fails:
                raise RuntimeError(f"{name} failed")
            return value
        return call

    def nnictl(*args, check=True):
        if args[0] == "stop":
            stopped.append(args[1])

    monkeypatch.setattr(rounds.manager, "create", failing("create", "exp-new"))
    monkeypatch.setattr(rounds.manager, "resume", failing("resume"))
    monkeypatch.setattr(rounds.manager, "trials", failing("trials", []))
    monkeypatch.setattr(rounds.manager, "nnictl", nnictl)
    runner = rounds.NniRounds(tmp_path, free_port())
    monkeypatch.setattr(runner, "prepare", lambda wl, trials: tmp_path / "config.yml")
    old = fails == "resume"
    with pytest.raises(RuntimeError, match=f"{fails} failed"):
        runner(parse_name("mm/N64K64M64"), "exp-old" if old else None, 4, 60.0, failing("started"))
    expected = {"create": [], "started": ["exp-new"], "trials": ["exp-new"], "resume": ["exp-old", "exp-old"]}
    assert stopped == expected[fails]
