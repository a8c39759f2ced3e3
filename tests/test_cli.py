"""`python -m trial` by hand: help, clear usage errors, one JSON line per measurement."""
import json
import os
import re
import subprocess
import sys

import pytest


def trial(*args):
    return subprocess.run([sys.executable, "-m", "trial", *args], capture_output=True, text=True, timeout=300)


def test_help_explains_specs_and_nni_use():
    out = trial("--help").stdout
    assert "N<n>C<c>HW<hw>F<f>K<k>ST<s>PD<p>" in out and "under NNI" in out and "wrong_result" in out


@pytest.mark.parametrize("args,message", [
    (["mm", "N512K1024"], "bad mm spec 'N512K1024'"),
    (["mm", "N8K8M8", "--params", "{K: 1}"], "--params is not valid JSON"),
    (["mm", "N8K8M8", "--params", "[1, 2]"], "--params must be a JSON object"),
])
def test_usage_errors_are_clear(args, message):
    p = trial(*args)
    assert p.returncode == 2 and message in p.stderr


def test_by_hand_prints_one_json_line():
    p = trial("mm", "N32K32M32PNT", "--target", "llvm", "--params",
              json.dumps({"K": [2, 2, 4, 2], "X": [2, 1, 4, 4], "Y": [1, 2, 2, 8], "unroll": 16, "vec": 2, "pipeline": 0,
                          "kmajor": 0, "pad": 0}),
              "--min-repeat-ms", "1")
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.strip().splitlines()
    report = json.loads(line)
    assert set(report) >= {"default", "gflops", "latency_ms", "latency_std_ms", "build_s", "status", "reason",
                           "target", "device", "params", "parameter_id"}
    assert report["status"] == "ok" and report["default"] == report["gflops"] > 0


def test_a_failing_config_still_exits_zero_with_its_status():
    p = trial("mm", "N32K32M32", "--target", "llvm", "--params", '{"K": [1, 1, 1]}')
    assert p.returncode == 0
    report = json.loads(p.stdout)
    assert report["status"] == "invalid" and report["default"] == 0.0 and "X: missing" in report["reason"]


def test_under_nnis_file_channel_the_trial_uses_nnis_sdk(tmp_path):
    """Where NNI gives no HTTP trial channel (its legacy file channel), the trial reads its parameters and
    writes its result through NNI's SDK; nnictl experiments (tests/test_nnictl.py) cover the HTTP channel."""
    from nni import dump

    params = {"K": [1, 4, 4, 2], "X": [2, 1, 4, 4], "Y": [1, 2, 2, 8], "unroll": 16, "vec": 1, "pipeline": 0,
              "kmajor": 0, "pad": 0}
    (tmp_path / "parameter.cfg").write_text(dump({"parameter_id": 7, "parameter_source": "algorithm",
                                                  "parameters": params, "parameter_index": 0}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNI_")}
    env.update(NNI_PLATFORM="local", NNI_SYS_DIR=str(tmp_path), NNI_OUTPUT_DIR=str(tmp_path), NNI_TRIAL_JOB_ID="t1")
    p = subprocess.run([sys.executable, "-m", "trial", "mm", "N32K32M32", "--target", "llvm", "--min-repeat-ms", "1"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    sent = (tmp_path / ".nni" / "metrics").read_bytes()
    assert sent.startswith(b"ME")
    metric = json.loads(sent[8:])
    report = json.loads(metric["value"])
    assert metric["parameter_id"] == 7 and metric["type"] == "FINAL" and metric["trial_job_id"] == "t1"
    assert report["status"] == "ok" and report["params"] == params and report["parameter_id"] == 7


def test_the_help_example_of_params_is_a_config_of_the_space():
    """The --params example in the help is a complete config that the op's search space holds, so it runs as
    printed (it once gave "K" three factors after the space had given it four)."""
    from searchspace import SearchSpace
    from trial import templates
    from trial.workload import parse

    out = trial("--help").stdout
    match = re.search(r"by hand: +python -m trial (\w+) (\S+) --params '([^']*)'", out)
    assert match, out
    op, spec, example = match.groups()
    wl, params = parse(op, spec), json.loads(example)
    template = templates.load(wl, params=params)
    assert set(params) == set(template.search_space(wl))
    assert SearchSpace.from_json(template.search_space(wl)).contains(params)
