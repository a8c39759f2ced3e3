"""A broken experiment ends at once with the tuner's message (issue 40, cases 1 and 2).

Case 1 runs through a real `nnictl create`: a search space the tuner rejects must end the experiment as
ERROR (NNI's status) and `experiments.tune` must print the tuner's reason and exit non-zero within 60 s,
also where NNI itself goes on saying RUNNING (NNI's own tuners). The in-process check that normally
catches such a space first (`preflight`) is replaced by NNI's config loader alone there, so the
experiment does start. Case 2 is that check: nothing starts, and the message is ours.
"""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from nni.experiment.config import ExperimentConfig
from nni_experiment import free_port, write_config

from experiments import manager, tune

WORKLOAD = "mm/N64K64M64"
REJECTED = [  # what the tuner's search-space model says of each
    ({"_type": "nope", "_value": [1]}, "unknown _type 'nope'"),
    ({"_type": "factor", "_value": [64, 0]}, "factor parts must be between 1 and 8, got 0"),
    ({"_type": "choice", "_value": []}, "choice _value must be a list of 1 to 4096 values, got []"),
]


def break_space(config: Path, knob: dict, name: str = "search_space.json") -> None:
    space = json.loads((config.parent / name).read_text())
    space[next(iter(space))] = knob
    (config.parent / name).write_text(json.dumps(space))


def nni_loader_only(monkeypatch):
    """`tune.main` without its own check: NNI's config loader alone, as `nnictl create` runs it."""
    monkeypatch.setattr(tune.preflight, "check", lambda path: ExperimentConfig.load(path).canonical_copy())


def run_main(args, port):
    began = time.monotonic()
    try:
        return tune.main(args), time.monotonic() - began
    finally:
        tune.nnictl("stop", "--port", str(port), check=False)


@pytest.mark.parametrize("knob, reason", REJECTED[:2], ids=["unknown-type", "factor-part-0"])
def test_a_space_the_tuner_rejects_fails_the_experiment_with_its_reason(knob, reason, tmp_path, monkeypatch, capsys):
    config = write_config(tmp_path, WORKLOAD, "opevo", trials=4)
    break_space(config, knob)
    nni_loader_only(monkeypatch)
    port = free_port()
    seen = {}
    wait = manager.wait

    def wait_and_look(*args, **kwargs):  # NNI's own status, once experiments.tune has seen the failure
        try:
            return wait(*args, **kwargs)
        finally:
            seen["status"] = manager._api(port, "/check-status")
    monkeypatch.setattr(tune, "wait", wait_and_look)
    code, took = run_main([str(config), "--port", str(port), "--timeout", "90"], port)
    err = capsys.readouterr().err
    assert code == 1 and took < 60, (code, took, err)
    assert f"OpEvoTuner rejected the search space: K: {reason}" in err
    assert seen["status"]["status"] == "ERROR", seen  # NNI says so too: the web UI shows the experiment failed


def test_a_builtin_tuner_that_dies_while_nni_says_running_fails_the_command(tmp_path, monkeypatch, capsys):
    """NNI's Random tuner rejects the space in the dispatcher, which NNI never reports: experiments.tune
    reads the reason from the dispatcher's log."""
    config = write_config(tmp_path, WORKLOAD, "random", trials=4)
    break_space(config, {"_type": "nope", "_value": [1]}, "search_space_twin.json")
    nni_loader_only(monkeypatch)
    port = free_port()
    code, took = run_main([str(config), "--port", str(port), "--timeout", "90", "--stop"], port)
    err = capsys.readouterr().err
    assert code == 1 and took < 60, (code, took, err)
    assert re.search(r"experiment \w+ failed: \S", err), err


def test_the_printed_stop_command_runs_from_the_users_folder(tmp_path, monkeypatch, capsys):
    """From another folder than the repository's, in a shell whose PATH has no virtual environment."""
    config = write_config(tmp_path, WORKLOAD, "opevo", trials=4)
    break_space(config, REJECTED[0][0])
    nni_loader_only(monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"
    try:
        assert tune.main([str(config), "--port", str(port), "--timeout", "90"]) == 1
        stop = re.search(r"stop it: (.+)", capsys.readouterr().err)[1]
        done = subprocess.run(stop, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Stop experiment success" in done.stdout + done.stderr, done
    finally:
        tune.nnictl("stop", "--port", str(port), check=False)


# ---- case 2: checked in this process, before nnictl ------------------------------------------------------

@pytest.fixture
def no_nnictl(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("nnictl create must not run for a broken experiment")
    monkeypatch.setattr(tune, "create", refuse)


def main_error(args, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        tune.main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("knob, reason", REJECTED, ids=["unknown-type", "factor-part-0", "empty-choice"])
def test_a_space_the_tuner_rejects_is_refused_before_nnictl(knob, reason, tmp_path, no_nnictl, capsys):
    config = write_config(tmp_path, WORKLOAD, "opevo", trials=4)
    break_space(config, knob)
    err = main_error([str(config)], capsys)
    assert f"the tuner tuners.opevo.OpEvoTuner rejects {config.parent / 'search_space.json'}: K: {reason}" in err


def test_a_space_that_is_not_json_is_refused_before_nnictl(tmp_path, no_nnictl, capsys):
    config = write_config(tmp_path, WORKLOAD, "opevo", trials=4)
    (config.parent / "search_space.json").write_text('{"K": {"_type": "factor", "_value": [64, 4]},}\n')
    err = main_error([str(config)], capsys)
    assert "search_space.json is not JSON: Expecting property name enclosed in double quotes at line 1" in err


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(searchSpaceFile="missing.json"), "searchSpaceFile missing.json cannot be read (No such file"),
    (lambda c: c.pop("searchSpaceFile"), "gives no search space"),
    (lambda c: c["tuner"]["classArgs"].update(mutate_rate=2), "rejects its classArgs: mutate_rate must be a number in [0, 1)"),
    (lambda c: c["tuner"]["classArgs"].update(warm_size=0), "rejects its classArgs: warm_size must be an integer from 1"),
    (lambda c: c["tuner"]["classArgs"].update(colour="red"), "rejects its classArgs: "),
    (lambda c: c.update(maxTrialNumber="many"), "NNI rejects the config"),
    (lambda c: c.update(trialConcurency=2), "is not an NNI experiment config"),
], ids=["missing-space-file", "no-space", "mutate-rate", "warm-size", "unknown-classarg", "bad-budget", "unknown-field"])
def test_a_broken_config_is_refused_before_nnictl(change, message, tmp_path, no_nnictl, capsys):
    config = write_config(tmp_path, WORKLOAD, "opevo", trials=4)
    loaded = yaml.safe_load(config.read_text())
    change(loaded)
    config.write_text(yaml.safe_dump(loaded))
    assert message in main_error([str(config)], capsys)


def test_a_config_nni_cannot_load_leaves_the_next_one_loadable(tmp_path, no_nnictl, capsys):
    """NNI's loader keeps a module-wide base path that a failed load left set, failing every later load."""
    config = write_config(tmp_path, WORKLOAD, "opevo", trials=4)
    broken = config.with_name("config_broken.yml")
    broken.write_text(config.read_text() + "trialConcurency: 2\n")
    assert "is not an NNI experiment config" in main_error([str(broken)], capsys)
    break_space(config, REJECTED[0][0])
    assert "rejects" in main_error([str(config)], capsys)


def test_a_config_that_is_not_yaml_is_refused_before_nnictl(tmp_path, no_nnictl, capsys):
    config = tmp_path / "config_opevo.yml"
    config.write_text("tuner: [unclosed\n")
    assert f"{config} is not an NNI experiment config" in main_error([str(config)], capsys)


KILLED_RUN_LOG = """\
[2026-12-02 12:37:21] INFO (nni.runtime.msg_dispatcher_base/MainThread) Dispatcher started
[2026-12-02 12:37:40] INFO (tuners.base/Thread-2 (command_queue_worker)) trial of parameter 3 ended (succeeded) without a result
[2026-12-02 12:38:14] ERROR (nni.runtime.msg_dispatcher_base/MainThread) Connection to NNI manager is broken. Failed to report error.
[2026-12-02 12:38:14] ERROR (nni.main/MainThread) [Errno 111] Connect call failed ('127.0.0.1', 20516)
"""
RESUMED = "[2026-12-02 12:38:27] INFO (nni.runtime.msg_dispatcher_base/MainThread) Dispatcher started\n"
TUNER_DIED = "[2026-12-02 12:38:40] ERROR (tuners.failure/Thread-1 (command_queue_worker)) OpEvo: no valid config\n"


def test_a_resumed_experiment_is_not_failed_by_the_errors_of_the_run_that_was_killed():
    """A killed manager's dispatcher logs that its manager is gone; `nnictl resume` appends to that log."""
    assert manager.fatal_error(KILLED_RUN_LOG + RESUMED) is None
    assert manager.fatal_error(KILLED_RUN_LOG + RESUMED + TUNER_DIED) == "OpEvo: no valid config"


def test_a_tuners_error_is_found_and_a_lost_manager_alone_is_not_a_tuners_failure():
    assert manager.fatal_error(RESUMED + TUNER_DIED) == "OpEvo: no valid config"
    assert manager.fatal_error(TUNER_DIED) == "OpEvo: no valid config"  # a log level that leaves no start line
    assert manager.fatal_error(KILLED_RUN_LOG.splitlines(keepends=True)[2]) is None
