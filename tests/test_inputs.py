"""Hostile input, one class at a time: every user input gets a message that names it and the problem, and
nothing ends in a traceback. Specs, --params, numeric options, workloads too large for the device or the
host, search-space files, classArgs and records paths."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchspace import SearchSpace, SpaceError
from trial import check
from trial.archs import target_of
from trial.inputs import InputError, load_json
from trial.measure import Options, measure
from trial.results import Status
from trial.workload import MAX_ELEMENTS, OPS, SpecError, parse
from tuners.opevo import OpEvoTuner


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300)


# ---- workload specs ------------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(st.sampled_from(OPS), st.text(max_size=60))
def test_any_text_is_a_workload_or_a_spec_error(op: str, spec: str) -> None:
    try:
        wl = parse(op, spec)
    except SpecError as err:
        assert str(err).startswith(f"bad {op} spec")
        return
    assert spec.isascii() and parse(*wl.key.split("/")).key == wl.key


@pytest.mark.parametrize("spec, message", [
    ("N５12K1024M1024", "expected the form"),  # a fullwidth digit: \d would have taken it
    ("N٥١٢K1024M1024", "expected the form"),  # Arabic-Indic digits
    ("N1234567890K1M1", "N has more than 9 digits"),
    ("N99999K99999M9", "A would hold 99999x99999 = 9,999,800,001 elements"),
    ("N1K99999M99999", "B would hold"),
    ("N" + "1" * 200, "at most 100 characters"),
])
def test_bad_mm_specs(spec: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse("mm", spec)


def test_conv_tensors_are_named_as_conv_has_them() -> None:
    with pytest.raises(SpecError, match="the input would hold"):
        parse("conv", "N100000C100HW100F1K1ST1PD0")
    assert MAX_ELEMENTS == 2**31 - 1


# ---- JSON texts and command-line numbers ---------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_load_json_answers_any_text_with_a_value_or_an_input_error(text: str) -> None:
    try:
        load_json(text, "--params")
    except InputError as err:
        assert str(err).startswith("--params ")


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, "nests deeper than 32 levels"),
    ('{"K": NaN}', "NaN is not a JSON number"),
    ('{"K": Infinity}', "Infinity is not a JSON number"),
    ('{"a": "' + "x" * (1 << 20) + '"}', "characters long; the limit is"),
])
def test_hostile_json(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_json(text, "--params")


@pytest.mark.parametrize("args, message", [
    (["mm", "N８K8M8"], "bad mm spec 'N８K8M8'"),
    (["mm", "N8K8M8", "--params", "[" * 10_000 + "]" * 10_000], "--params nests deeper than 32 levels"),
    (["mm", "N8K8M8", "--params", '{"unroll": NaN}'], "NaN is not a JSON number"),
    (["mm", "N8K8M8", "--params", "{" + '"a": 1, ' * 10_000 + '"b": 2}'], "characters long"),
    (["mm", "N8K8M8", "--repeat", "2"], "argument --repeat: must be between 5 and 1,000, got 2"),
    (["mm", "N8K8M8", "--seed", "-1"], "argument --seed: must be between 0 and"),
    (["mm", "N8K8M8", "--run-timeout", "nan"], "argument --run-timeout: must be between 0.1 and 3,600"),
    (["mm", "N8K8M8", "--build-timeout", "1e400"], "argument --build-timeout: must be between"),
    (["mm", "N8K8M8", "--min-repeat-ms", "x"], "argument --min-repeat-ms: expected an integer, got 'x'"),
    (["mm", "N8K8M8", "--runner", "rpc:/h:1/k"], "argument --runner: runner 'rpc:/h:1/k': expected 'local' or rpc://HOST:PORT/KEY"),
    (["mm", "N8K8M8", "--runner", "rpc://h:0/k"], "(port 1-65535"),
])
def test_trial_usage_errors_name_the_input(args: list[str], message: str) -> None:
    p = run("trial", *args)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("module, args, message", [
    ("experiments.write", ["mm", "N8K8M８"], "bad mm spec"),
    ("experiments.write", ["mm", "N8K8M8", "--concurrency", "0"], "argument --concurrency: must be between 1"),
    ("experiments.write", ["mm", "N8K8M8", "--arch", "sm_1"], "argument --arch: invalid choice"),
    ("benchmarks.compare", ["mm/N8K8M8", "--trials", "-5"], "argument --trials: must be between 1"),
    ("benchmarks.compare", ["mm/N8K8M8", "--port", "70000"], "argument --port: must be between 1 and 65,535"),
    ("benchmarks.compare", ["mm/N8K8M8", "--tuners", "metaschedule", "--runner", "rpc://h:9190/k"],
     "MetaSchedule and --nnictl run on this machine's device"),
    ("benchmarks.compare", ["mm/N8K8M8", "--tuners", "opevo[mutate_rate=2]"], "mutate_rate must be a number in [0, 1)"),
    ("experiments.write", ["mm", "N8K8M8", "--runner", "rpc://h/k"], "expected 'local' or rpc://HOST:PORT/KEY"),
    ("experiments.remote", ["c.yml", "--machine", "u@h", "--python", "python3"], "--python must be a full path"),
    ("experiments.remote", ["nowhere.yml", "--machine", "u@h", "--python", "/p/python"], "nowhere.yml"),
    ("experiments.tune", ["nowhere.yml"], "no experiment config at nowhere.yml"),
    ("trial.records", ["best", "mm/N8K8M8", "-n", "0"], "argument -n: must be between 1"),
])
def test_other_commands_name_the_input(module: str, args: list[str], message: str) -> None:
    p = run(module, *args)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr


# ---- workloads too large for the device or the host ----------------------------------------------------

def test_a_workload_too_large_for_the_device_is_refused_before_a_build() -> None:
    wl = parse("mm", "N40000K40000M40000")  # 3 x 6.4 GB of float32
    h100 = dataclasses.replace(target_of("sm_90"), device_name="NVIDIA H100 80GB HBM3", memory_bytes=80 * 2**30)
    small = dataclasses.replace(h100, device_name="a 16 GB GPU", memory_bytes=16 * 2**30)
    problem = check.memory_problem(wl, small)
    assert problem.startswith("mm/N40000K40000M40000 is too large for a 16 GB GPU: its inputs and output take 17.9 GiB")
    assert "of the device's 16.0 GiB" in problem


def test_a_workload_too_large_for_the_host_is_an_invalid_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check.psutil, "virtual_memory", lambda: SimpleNamespace(available=2**30, total=2**31))
    result = measure(parse("mm", "N16384K16384M16384"), None, Options(target="llvm", min_repeat_ms=1))
    assert result.status == Status.INVALID
    assert "is too large for this machine: its inputs and output take 3.0 GiB, more than 90% of the 1.0 GiB" in result.reason


def test_by_hand_a_workload_beyond_32_bit_indexing_is_a_usage_error() -> None:
    p = run("trial", "mm", "N50000K50000M50000")
    assert p.returncode == 2 and "A would hold 50000x50000 = 2,500,000,000 elements" in p.stderr


# ---- search spaces ---------------------------------------------------------------------------------------

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                           max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["factor", "choice", "discrete", "perm", "uniform", 3]), json_values)
def test_any_parameter_entry_is_a_parameter_or_a_space_error_naming_it(kind, value) -> None:
    try:
        SearchSpace.from_json({"knob": {"_type": kind, "_value": value}})
    except SpaceError as err:
        assert str(err).startswith("knob: ") and len(str(err)) < 400


@pytest.mark.parametrize("entry, message", [
    ({"_type": "factor", "_value": [2**40, 3]}, "product must be between 1 and 2,147,483,647"),
    ({"_type": "factor", "_value": [1024, 50]}, "parts must be between 1 and 8"),
    ({"_type": "perm", "_value": [50]}, "n must be between 1 and 10"),
    ({"_type": "choice", "_value": list(range(5000))}, "a list of 1 to 4096 values, got [0, 1, 2"),
    ({"_type": "discrete", "_value": list(range(5000))}, "a list of 1 to 4096 numbers"),
])
def test_search_space_limits(entry: dict, message: str) -> None:
    with pytest.raises(SpaceError, match=message.replace("[", r"\[")):
        SearchSpace.from_json({"knob": entry})
    with pytest.raises(SpaceError, match="100 parameters; the limit is 64"):
        SearchSpace.from_json({f"p{i}": {"_type": "perm", "_value": [2]} for i in range(100)})


@pytest.mark.parametrize("content, message", [
    (None, "cannot read the search space"),
    (b"\xff\xfe not utf-8", "is not UTF-8 text"),
    (b"[" * 100_000, "nests too deeply"),
    (b'{"K": ', "is not valid JSON"),
    (b" " * (2 << 20), "a search-space file may have at most 1,048,576"),
])
def test_search_space_files(tmp_path, content: bytes | None, message: str) -> None:
    path = tmp_path / "search_space.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SpaceError, match=message):
        SearchSpace.load(path)


# ---- classArgs and records paths -----------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["optimize_mode", "seed", "warm_start", "workload", "device", "warm_size", "target",
                        "parents_size", "offspring_size", "mutate_rate"]), json_values)
def test_any_class_arg_value_is_accepted_or_a_value_error_naming_it(name: str, value) -> None:
    kwargs = {name: value, **({"workload": "mm/N512K1024M1024"} if name in ("warm_start", "target") else {})}
    try:
        OpEvoTuner(**kwargs)
    except ValueError as err:
        assert name in str(err) or "workload" in str(err), err


def test_records_paths_that_cannot_be_a_store(tmp_path) -> None:
    (tmp_path / "garbage.sqlite").write_text("not a database")
    for path, message in [(tmp_path, "unable to open database file"), (tmp_path / "garbage.sqlite", "file is not a database")]:
        p = run("trial.records", "--records", str(path), "list")
        assert p.returncode == 2 and f"records store {path}: {message}" in p.stderr, p.stderr
    p = run("trial", "mm", "N8K8M8", "--target", "llvm", "--min-repeat-ms", "1", "--records", str(tmp_path))
    assert p.returncode == 0 and json.loads(p.stdout)["status"] == "ok"
    assert f"warning: measurement not recorded: records store {tmp_path}" in p.stderr
