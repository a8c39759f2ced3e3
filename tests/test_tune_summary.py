"""`make tune` reads like a tool (issue 43): a live progress line, then a summary whose figures are
re-timed side by side, with a convergence plot and commands that run as printed."""
import io
import os
import re
import subprocess
from pathlib import Path

from nni_experiment import free_port, write_config

from experiments import commands, tune
from experiments.manager import TrialRecord
from experiments.progress import Progress
from experiments.summary import Timed, table

WORKLOAD = "mm/N64K64M64"


def record(n, status="SUCCEEDED", outcome="ok", gflops=0.0):
    metric = None if outcome is None else {"status": outcome, "gflops": gflops, "params": {"n": n}}
    return TrialRecord(f"t{n}", status, n, {"n": n}, metric, n)


RECORDS = [record(0, gflops=10.0), record(1, gflops=12.5), record(2, outcome="compile_error"),
           record(3, "RUNNING", None)]


def test_progress_off_a_terminal_is_a_plain_line_at_an_interval():
    out = io.StringIO()
    now = [100.0]
    progress = Progress(8, out, interval_s=60, bar=False, clock=lambda: now[0])
    now[0] += 10  # three trials finished in 10 s
    progress("RUNNING", RECORDS)
    progress("RUNNING", RECORDS)  # within the interval, same state: nothing new
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("RUNNING: 3/8 trials (ok 2, compile_error 1; 1 running, best 12.5 GFLOPS), "
                             "0.30 trials/s, about 17 s left")
    progress("NO_MORE_TRIAL", RECORDS)  # a new state is shown at once
    assert "NO_MORE_TRIAL: 3/8 trials" in out.getvalue().splitlines()[-1]


def test_progress_on_a_terminal_is_a_bar():
    out = io.StringIO()
    progress = Progress(8, out, bar=True)
    progress("RUNNING", RECORDS)
    progress.close()
    text = out.getvalue()
    assert "tuning 3/8 |" in text and "ok 2, compile_error 1; 1 running, best 12.5 GFLOPS" in text
    assert "trial/s" in text or "s/trial" in text


def test_the_table_compares_and_says_how_noisy_cpu_figures_are():
    rows = [Timed("tuned (trial 7)", "ok", 50.0, 0.02, 0.031, warning="the CPU was busy (load 3.1)"),
            Timed("hand-picked", "ok", 40.0, 0.025, 0.012),
            Timed("cuBLAS FP32 (TF32 off)", "ok", 100.0, 0.01)]
    text = "\n".join(table(rows, cpu=True))
    assert re.search(r"tuned \(trial 7\) +50\.0 +0\.0200 +3\.1%", text)
    assert "tuned / hand-picked: 1.25x" in text and "tuned / cuBLAS FP32 (TF32 off): 0.50x" in text
    assert "the repeats of each figure spread by 1.2-3.1% (standard deviation over mean)" in text
    assert "warning (tuned (trial 7)): the CPU was busy (load 3.1)" in text
    assert "spread by" not in "\n".join(table(rows, cpu=False))


def test_commands_name_the_environment_relative_to_the_users_folder(tmp_path, monkeypatch):
    script = tmp_path / ".venv" / "bin" / "nnictl"
    script.parent.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert commands.shell_path(script) == ".venv/bin/nnictl"
    monkeypatch.chdir(tmp_path / ".venv")
    assert commands.shell_path(script) == "bin/nnictl"
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    assert commands.shell_path(script) == str(script)


def test_tune_ends_with_a_summary_whose_commands_run(tmp_path, monkeypatch, capsys):
    """A short CPU experiment through nnictl, from a folder that is not the repository, then the printed
    export and stop commands, run as printed in a shell whose PATH has no virtual environment."""
    config = write_config(tmp_path, WORKLOAD, "opevo", trials=4, seed=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    port = free_port()
    try:
        assert tune.main([str(config), "--port", str(port), "--timeout", "300"]) == 0
        out = capsys.readouterr().out
        records = tune.trials(port)
        exp_id = re.search(r"experiment (\w+) started", out)[1]
        assert f"web UI: http://127.0.0.1:{port}" in out and out.count("http://") == 1  # once, at the start
        assert re.search(r"DONE: 4/4 trials \(.*\), [\d.]+ trials/s", out)
        top = max((r for r in records if r.metric["status"] == "ok"), key=lambda r: r.metric["gflops"])
        assert f"4 trials, best {top.metric['gflops']:.1f} GFLOPS" in out
        assert f"at trial {top.sequence + 1} of 4" in out
        assert re.search(rf"tuned \(trial {top.sequence + 1}\) +[\d.]+ +[\d.]+ +[\d.]+%", out)
        assert re.search(r"hand-picked +[\d.]+ +[\d.]+ +[\d.]+%", out) and "tuned / hand-picked: " in out
        assert "CPU timings: the repeats of each figure spread by" in out
        plot = Path(re.search(r"convergence plot: (.+)", out)[1])
        assert plot.parent == tmp_path / "nni" / exp_id  # beside the experiment's own files
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        env.update(PATH="/usr/bin:/bin", PYTHONPATH=str(Path(tune.__file__).parents[1]))
        export = re.search(r"export the kernel: +(.+)", out)[1]
        done = subprocess.run(export, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done
        assert list((elsewhere / "exports").rglob("kernel.so")), done.stdout
        stop = re.search(r"stop the experiment and its web UI: +(\S+ stop \w+)", out)[1]
        assert stop.endswith(f"stop {exp_id}")
        done = subprocess.run(stop, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Stop experiment success" in done.stdout + done.stderr, done
    finally:
        tune.nnictl("stop", "--port", str(port), check=False)
