"""The benchmark protocol end to end on the CPU: a run record per (workload, tuner, seed), resumed, the tables."""
import json

import pytest

from benchmarks import protocol, protocol_report, protocol_run, workloads
from trial.workload import parse_name

TINY = ["mm/N32K32M32", "conv/N1C2HW8F4K3ST1PD1"]
TUNERS, SEEDS, TRIALS, WORKERS = ["opevo", "random"], 2, 4, 2


def argv(out, *more):
    return ["--workloads", *TINY, "--tuners", *TUNERS, "--seeds", str(SEEDS), "--trials", str(TRIALS),
            "--workers", str(WORKERS), "--target", "llvm", "--min-repeat-ms", "1", "--out", str(out),
            "--no-progress", *more]


def files(out):
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*.json")}


def first_at(curve, fraction=0.95):
    """Trials and seconds to `fraction` of the best, from a record's curve rows (index, seconds, status, gflops)."""
    ok = [row for row in curve if row[2] == "ok" and row[3] > 0]
    best = max(row[3] for row in ok)
    row = next(row for row in ok if row[3] >= fraction * best)
    return row[0], row[1]


def test_protocol_records_each_run_resumes_and_prints_the_tables(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert protocol.main(argv(out)) == 0
    printed = capsys.readouterr()
    expected = {str(protocol_run.path(out, parse_name(w), t, s, TRIALS, WORKERS).relative_to(out))
                for w in TINY for t in TUNERS for s in range(SEEDS)}
    assert set(files(out)) == expected and not list(out.rglob("*.part"))
    for name in expected:
        record = json.loads((out / name).read_text())
        assert record["trials"] == len(record["curve"]) == TRIALS and record["budget"] == TRIALS
        assert record["rejected"] == 0  # the suite's tuners keep the rules
        assert record["class_args"] == protocol_run.class_args(record["tuner"], WORKERS)
        retimed = record["retimed"]
        assert 1 <= len(retimed) <= protocol_run.RETIMED
        assert len({json.dumps(r["params"], sort_keys=True) for r in retimed}) == len(retimed)  # distinct configs
        assert [r["search_gflops"] for r in retimed] == sorted((r["search_gflops"] for r in retimed), reverse=True)
        assert record["best_gflops"] == max(r["gflops"] for r in retimed) > 0
        assert record["search_best_gflops"] == max(row[3] for row in record["curve"] if row[2] == "ok")
        assert retimed[0]["search_gflops"] == record["search_best_gflops"]
        to = record["to_fraction"]
        assert (to["trials"], round(to["seconds"], 3)) == first_at(record["curve"])
        assert "vendor" not in record and "ratio" not in record  # the report's, from the workload's vendor
    text = printed.out
    assert (out / "summary.md").read_text().strip() == text.strip()
    assert "python -m benchmarks.protocol --workloads mm/N32K32M32" in text and "Versions: TVM" in text
    for workload in TINY:
        for tuner in TUNERS:
            assert f"| {workload} | given on the command line | {tuner} | {SEEDS} |" in text
    assert "Vendor ratios are absent" in text
    assert f"{len(expected)} runs measured" in printed.err

    def must_not_run(*args, **kwargs):
        raise AssertionError("a recorded run was measured again")

    before = files(out)
    monkeypatch.setattr(protocol_run, "one", must_not_run)
    assert protocol.main(argv(out)) == 0
    again = capsys.readouterr()
    assert files(out) == before and "0 runs measured" in again.err
    assert again.out.split("## given", 1)[1] == text.split("## given", 1)[1]  # the same table, from the files


def test_a_killed_protocol_runs_only_what_is_missing_and_a_failed_run_is_not_recorded(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    one_workload = ["--workloads", TINY[0], "--tuners", "random", "--seeds", "3", "--trials", "3",
                    "--target", "llvm", "--min-repeat-ms", "1", "--out", str(out), "--no-progress"]
    wl = parse_name(TINY[0])
    real, calls, failing = protocol_run.one, [], [2]

    def counted(wl, model, tuner, seed, *args, **kwargs):
        calls.append(seed)
        if seed in failing:
            failing.remove(seed)
            raise RuntimeError("device lost")
        return real(wl, model, tuner, seed, *args, **kwargs)

    monkeypatch.setattr(protocol_run, "one", counted)
    assert protocol.main(one_workload) == 1  # seed 2 failed
    first = capsys.readouterr().out
    assert "**Runs that failed**" in first and "random seed 2: RuntimeError: device lost" in first
    assert "| random | 2 |" in first
    killed = protocol_run.path(out, wl, "random", 0, 3, protocol.registry.CONCURRENCY)
    killed.unlink()
    (killed.parent / f".{killed.name}.abc.part").write_text('{"half": ')  # a write cut off by a kill
    calls.clear()
    assert protocol.main(one_workload) == 0
    assert calls == [0, 2]  # the run whose file is gone and the failed one; not seed 1
    assert "| random | 3 |" in capsys.readouterr().out
    assert json.loads(killed.read_text())["seed"] == 0


def test_runs_at_a_time_each_record_says_how_many(tmp_path, capsys, monkeypatch):
    """--parallel 2: the missing runs two at a time (seen running together), every one recorded once, and
    each record says it shared the host with another."""
    import threading

    out, real = tmp_path / "out", protocol_run.one
    running, most, lock = [0], [0], threading.Lock()

    def watched(*args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(protocol_run, "one", watched)
    assert protocol.main(["--workloads", TINY[0], "--tuners", "random", "--seeds", "4", "--trials", "3",
                          "--workers", "1", "--parallel", "2", "--target", "llvm", "--min-repeat-ms", "1",
                          "--out", str(out), "--no-progress"]) == 0
    records = [json.loads(p.read_text()) for p in sorted(out.rglob("*.json"))]
    assert sorted(r["seed"] for r in records) == [0, 1, 2, 3] and {r["parallel"] for r in records} == {2}
    assert most[0] == 2 and "4 runs measured" in capsys.readouterr().err


def test_metaschedule_runs_alone_after_the_others_its_fastest_schedules_retimed(tmp_path, capsys, monkeypatch):
    """MetaSchedule's runs wait for the suite's tuners' runs, then run one at a time (each record says so);
    its record holds its fastest schedules, each compiled and timed by the suite, with its trace."""
    out, real, order = tmp_path / "out", protocol_run.one, []

    def watched(wl, model, tuner, *args, **kwargs):
        order.append(tuner)
        return real(wl, model, tuner, *args, **kwargs)

    monkeypatch.setattr(protocol_run, "one", watched)
    label = "metaschedule[population_size=4,init_min_unmeasured=1]"
    assert protocol.main(["--workloads", TINY[0], "--tuners", label, "random", "--seeds", "2", "--trials", "4",
                          "--workers", "1", "--parallel", "2", "--target", "llvm", "--min-repeat-ms", "1",
                          "--out", str(out), "--no-progress"]) == 0
    assert order == ["random", "random", label, label]
    records = {(r["tuner"], r["seed"]): r for r in (json.loads(p.read_text()) for p in out.rglob("*.json"))}
    assert {(t, r["parallel"]) for (t, _), r in records.items()} == {("random", 2), (label, 1)}
    ms = records[(label, 0)]
    assert protocol_run.path(out, parse_name(TINY[0]), label, 0, 4, 1).name == (
        "metaschedule_population_size_4_init_min_unmeasured_1-t4-w1-s0.json")
    assert ms["class_args"]["search"] == {"population_size": 4, "init_min_unmeasured": 1}
    assert 1 <= len(ms["retimed"]) <= 2 * protocol_run.RETIMED and all(r["trace"] for r in ms["retimed"])
    assert {r["pipeline"] for r in ms["retimed"]} == {"stock", "suite"}  # TVM's pipeline and the suite's
    assert ms["best_gflops"] == max(r["gflops"] for r in ms["retimed"]) > 0 and len(ms["curve"]) == ms["trials"]
    assert f"| {TINY[0]} | given on the command line | {label} | 2 |" in capsys.readouterr().out


def fake_library(wl, target, repeat, min_repeat_ms, compile_mode=None):
    """The vendor at 2 GFLOPS, and torch.compile of it at 3 after 5 s of compiling."""
    if compile_mode:
        return {"library": "compiled BLAS", "gflops": 3.0, "latency_ms": 0.7, "compile_s": 5.0, "check": None}
    return {"library": "fake BLAS", "gflops": 2.0, "latency_ms": 1.0}


def test_runs_with_a_vendor_figure_get_ratios_with_intervals_and_the_peer_its_ratio(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(protocol_run, "baseline", fake_library)
    out = tmp_path / "out"
    assert protocol.main(["--workloads", TINY[0], "--tuners", "opevo", "--seeds", "2", "--trials", "3",
                          "--target", "llvm", "--min-repeat-ms", "1", "--out", str(out), "--no-progress"]) == 0
    records = [json.loads(p.read_text()) for p in sorted(out.rglob("opevo-*.json"))]
    ratios = sorted(r["best_gflops"] / 2.0 for r in records)
    assert not any("vendor" in r or "ratio" in r for r in records)  # the vendor is timed alone after them
    alone = json.loads(protocol_run.vendor_path(out, parse_name(TINY[0])).read_text())
    assert alone["gflops"] == 2.0 and alone["library"] == "fake BLAS" and {"TVM", "NNI"} <= set(alone["versions"])
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith(f"| {TINY[0]} |"))
    assert f"{(ratios[0] + ratios[1]) / 2:.2f} [{ratios[0]:.2f}, {ratios[1]:.2f}]" in row
    assert "Vendor ratios are absent" not in text
    assert f"| {TINY[0]} | given on the command line | torch.compile max-autotune | 1 | 3.0 | 1.50 | - | 5.0 |" in text
    peer = json.loads(protocol_run.peer_path(out, parse_name(TINY[0])).read_text())
    assert peer["mode"] == protocol_run.COMPILE_MODE and peer["vendor"]["gflops"] == 2.0


def test_a_peer_that_fails_to_compile_is_a_record_and_the_cpu_has_none(tmp_path, monkeypatch):
    def failing(wl, target, repeat, min_repeat_ms, compile_mode=None):
        if compile_mode:
            raise RuntimeError("Inductor: no template")
        raise AssertionError("no vendor figure after a failed compilation")

    monkeypatch.setattr(protocol_run, "baseline", failing)
    wl, options = parse_name(TINY[0]), protocol.Options(target="llvm")
    record = protocol_run.peer(wl, "a model", "cuda sm_90", options)
    assert record["error"] == "RuntimeError: Inductor: no template" and record["ratio"] is None
    row = protocol_report.peer_row(workloads.Entry(TINY[0], "m"), protocol_run.PEER, record)
    assert row[4].startswith("failed: RuntimeError: Inductor")
    monkeypatch.undo()
    assert protocol_run.peer(wl, "a model", "llvm", options) is None  # the vendor and the peer need CUDA


def test_save_leaves_no_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "a" / "run.json"
    protocol_run.save(target, {"x": 1})
    assert protocol_run.load(target) == {"x": 1}
    monkeypatch.setattr(protocol_run.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        protocol_run.save(tmp_path / "b" / "run.json", {"x": 2})
    assert not (tmp_path / "b" / "run.json").exists() and not list((tmp_path / "b").iterdir())
    (tmp_path / "c.json").write_text('{"cut')
    assert protocol_run.load(tmp_path / "c.json") is None and protocol_run.load(tmp_path / "none.json") is None


@pytest.mark.parametrize("bad, why", [(["--tuners", "nope"], "unknown tuner 'nope'"),
                                      (["--tuners", "opevo[mutate_rate=0.1]"], "no variants"),
                                      (["--tuners", "metaschedule[bogus=1]"], "unknown MetaSchedule search"),
                                      (["--set", "train"], "unknown workload set 'train'"),
                                      (["--seeds", "0"], "--seeds: must be between 1"),
                                      (["--workloads", "mm/N0K1M1"], "N must be positive")])
def test_bad_input_is_a_clear_error(bad, why, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        protocol.main([*bad, "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2 and why in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_quick_is_each_sets_first_workload_opevo_one_seed_64_trials():
    args = protocol.parser().parse_args(["--quick"])
    protocol.resolve(args)
    assert (args.tuners, args.seeds, args.trials) == (["opevo"], 1, 64)
    assert protocol.plan_sets(args) == {"study": (workloads.STUDY[0],), "held-out": (workloads.HELD_OUT[0],)}
    assert workloads.STUDY[0].workload == "mm/N512K1024M1024"
    args = protocol.parser().parse_args(["--quick", "--set", "held-out", "--seeds", "3"])
    protocol.resolve(args)
    assert args.seeds == 3 and protocol.plan_sets(args) == {"held-out": (workloads.HELD_OUT[0],)}
    args = protocol.parser().parse_args(["--quick", "--set", "tensor-cores"])
    assert protocol.plan_sets(args) == {"tensor-cores": (workloads.TENSOR_CORES[0],)}
    args = protocol.parser().parse_args([])
    protocol.resolve(args)
    assert (args.tuners, args.seeds, args.trials) == (["opevo", "gbfs", "na2c", "random", "metaschedule"], 5, 128)
    assert protocol.plan_sets(args) == {"study": workloads.STUDY, "held-out": workloads.HELD_OUT}


def test_header_names_the_command_device_and_versions():
    text = protocol_report.header(["--quick"], "NVIDIA H100", {"TVM": "0.27", "CUDA": "12.8", "NVIDIA driver": "570"})
    assert "`python -m benchmarks.protocol --quick`" in text and "Device: NVIDIA H100" in text
    assert "Versions: TVM 0.27, CUDA 12.8, NVIDIA driver 570" in text
    found = protocol_report.versions()
    assert {"TVM", "NNI"} <= set(found)


def test_runs_get_the_classargs_and_concurrency_of_an_experiment_on_one_gpu(monkeypatch):
    """The frozen settings as `nnictl create` runs them: OpEvo breeds as many offspring as trials in flight,
    and --workers auto is an experiment's trials in flight on one GPU of this machine (a CPU: fewer)."""
    from benchmarks import driver
    from experiments import registry, write

    assert registry.class_args("opevo", 16)["offspring_size"] == 16
    assert registry.class_args("opevo", 4) == registry.TUNERS["opevo"]["classArgs"]
    assert driver.make_tuner("opevo", 0, concurrency=16)[0].offspring_size == 16
    assert protocol_run.class_args("random", 16) == {}
    gpu = type("Found", (), {"is_gpu": True})()
    monkeypatch.setattr(protocol, "device", lambda kind: gpu)
    monkeypatch.setattr(write.os, "cpu_count", lambda: 64)
    assert protocol.workers(protocol.parser().parse_args([])) == write.IN_FLIGHT_PER_GPU
    assert protocol.workers(protocol.parser().parse_args(["--workers", "3"])) == 3
    gpu.is_gpu = False
    assert protocol.workers(protocol.parser().parse_args([])) == registry.CONCURRENCY
