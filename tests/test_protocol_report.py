"""The protocol's report: each run's ratio to its workload's vendor timed alone, and `--report`, which reads the
records of a protocol as far as it has come and runs nothing."""
import shlex
import threading
import time

import pytest

from benchmarks import protocol, protocol_jobs, protocol_publish, protocol_report, protocol_run, workloads
from trial.workload import parse_name

WORKLOAD = "mm/N32K32M32"


def argv(out, *more):
    return ["--workloads", WORKLOAD, "--tuners", "opevo", "random", "--seeds", "2", "--trials", "8",
            "--target", "llvm", "--out", str(out), "--no-peer", *more]


def save_run(out, tuner, seed, best, vendor=None, workers=16, **more):
    """A run's record as the protocol writes it, with what the report reads."""
    record = {"workload": WORKLOAD, "tuner": tuner, "seed": seed, "best_gflops": best, "device": "NVIDIA H200",
              "vendor": {"gflops": vendor} if vendor else None, "ratio": best / vendor if vendor else None,
              "to_fraction": {"fraction": 0.95, "trials": 5, "seconds": 1.5},
              "finished": f"2026-11-27T22:1{seed}:00Z", **more}
    protocol_run.save(protocol_run.path(out, parse_name(WORKLOAD), tuner, seed, 8, workers), record)


def row_of(text, tuner):
    return next(line for line in text.splitlines() if line.startswith(f"| {WORKLOAD} | given on the command line "
                                                                       f"| {tuner} |"))


def nothing_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("--report measured something")

    for module, name in ((protocol_run, "one"), (protocol_run, "baseline"), (protocol, "device"),
                         (protocol_jobs, "device"), (protocol, "Records")):
        monkeypatch.setattr(module, name, refuse)


def test_report_reads_the_records_runs_nothing_and_says_how_far_they_go(tmp_path, capsys, monkeypatch):
    """Records written while each run timed the vendor beside it: one of those timings read 5x slow, so the
    ratios divide by the median of the runs' vendor figures, and the table says so.  Each row names the templates
    of its runs' best configs, as records say them or, written before they did, as their best configs' knobs do."""
    from trial.templates import matmul

    out = tmp_path / "records"
    save_run(out, "opevo", 0, 40.0, vendor=30.0, template="simt")
    save_run(out, "opevo", 1, 36.0, vendor=6.0,  # timed while other runs' threads held the process
             best_params=matmul.default_params(parse_name(WORKLOAD), True))
    save_run(out, "random", 0, 33.0, vendor=30.0, versions={"TVM": "0.27.0.post1"})
    nothing_runs(monkeypatch)
    assert protocol.main(argv(out, "--report")) == 0
    printed = capsys.readouterr()
    assert "Runs: 3 of the 4 planned runs of the tuners are recorded; this report ran none" in printed.out
    assert "Versions: TVM 0.27.0.post1, not said by 2 of the 3 records" in printed.out
    assert "Date: runs finished from 2026-11-27T22:10:00Z to 2026-11-27T22:11:00Z" in printed.out
    assert "Device: NVIDIA H200" in printed.out and "--report" in printed.out
    assert "| opevo | 2 | 38.0 [36.0, 40.0] | 1.27 [1.20, 1.33] |" in row_of(printed.out, "opevo")
    assert "| matmul x1, simt x1 |" in row_of(printed.out, "opevo")
    assert row_of(printed.out, "random").endswith("| 1.10 | 5 | 1.5 | - | 30.0 (median of 3 beside runs) |")
    assert not (out / "summary.md").exists() and "0 runs measured" in printed.err


def test_a_vendor_timed_alone_is_every_runs_denominator():
    runs = [{"best_gflops": 40.0, "vendor": {"gflops": 6.0}}, {"best_gflops": 20.0, "vendor": None}]
    vendor = protocol_report.vendor_of({"gflops": 32.0, "library": "cuBLAS"}, runs)
    assert vendor == (32.0, "alone")
    assert [protocol_report.with_ratio(r, vendor)["ratio"] for r in runs] == [1.25, 0.625]
    assert protocol_report.vendor_of(None, runs) == (6.0, "median of 1 beside runs")
    assert protocol_report.vendor_of(None, runs[1:]) == (None, "")
    assert protocol_report.with_ratio(runs[1], (None, ""))["ratio"] is None
    differs = protocol_report.vendor_of({"gflops": 32.0, "check": "max relative error 0.3"}, runs)
    assert protocol_report.row(workloads.Entry(WORKLOAD, "m"), "opevo", [], differs)[-1] == (
        "32.0 (its output differs from the float64 reference)")


def test_a_run_without_a_kernel_is_a_failure_with_its_reason_not_a_figure():
    """MetaSchedule gives up on some workloads (no valid schedule) and its tensor-core rules fail on others: those
    runs are named with TVM's reason and left out of the medians, not counted as 0 GFLOPS."""
    entry, vendor = workloads.Entry(WORKLOAD, "m"), (32.0, "alone")
    gave_up = {"best_gflops": 0.0, "retimed": [{"status": "invalid", "reason": "MetaSchedule found no valid schedule",
                                                "gflops": 0.0}], "curve": []}
    none_ran = {"best_gflops": 0.0, "retimed": [], "curve": [[1, 0.5, "compile_error", 0.0]] * 3}
    ran = [{"best_gflops": g, "to_fraction": {"trials": 4, "seconds": 2.0}} for g in (40.0, 48.0)]
    assert protocol_report.failure(none_ran) == "no candidate ran; 3 compile_error"
    assert protocol_report.with_ratio(gave_up, vendor)["ratio"] is None
    runs = [protocol_report.with_ratio(r, vendor) for r in (*ran, gave_up)]
    cells = protocol_report.row(entry, "metaschedule", runs, vendor)
    assert cells[3:8] == ["3", "44.0 [40.0, 48.0] (1 of 3 runs found no kernel: MetaSchedule found no valid "
                          "schedule)", "1.38 [1.25, 1.50]", "4", "2.0"]
    cells = protocol_report.row(entry, "metaschedule", [gave_up, none_ran], vendor)
    assert cells[3:6] == ["2", "no kernel in any run: MetaSchedule found no valid schedule", "-"]


@pytest.mark.parametrize("saved, why", [([], "no run records of 8 trials under"),
                                        ([4, 16], "several run records of 8 trials under")])
def test_report_without_one_set_of_records_is_a_clear_error(saved, why, tmp_path, capsys, monkeypatch):
    out = tmp_path / "records"
    for seed, workers in enumerate(saved):
        save_run(out, "opevo", seed, 40.0, workers=workers)
    nothing_runs(monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        protocol.main(argv(out, "--report"))
    assert stopped.value.code == 2 and why in capsys.readouterr().err
    if saved:  # the runs' trials in flight named: the report then reads those
        assert protocol.main(argv(out, "--report", "--workers", "4")) == 0
        assert "| opevo | 1 | 40.0 |" in capsys.readouterr().out


def test_the_vendor_is_timed_once_a_workload_after_every_run_with_no_run_in_flight(tmp_path, capsys, monkeypatch):
    """Timed while runs shared the protocol's process, the vendor's CUDA graph replays waited for their
    threads; now it is timed from the main thread once the runs are done, and a second protocol reuses it."""
    out, real, running, seen = tmp_path / "out", protocol_run.one, [0], []

    def run(*args, **kwargs):
        running[0] += 1
        try:
            return real(*args, **kwargs)
        finally:
            running[0] -= 1

    def library(wl, target, repeat, min_repeat_ms, compile_mode=None):
        seen.append((wl.name, running[0], threading.current_thread() is threading.main_thread()))
        return {"library": "fake BLAS", "gflops": 2.0, "latency_ms": 1.0}

    monkeypatch.setattr(protocol_run, "one", run)
    monkeypatch.setattr(protocol_run, "baseline", library)
    assert protocol.main(argv(out, "--workers", "1", "--parallel", "2", "--min-repeat-ms", "1")) == 0
    assert seen == [(WORKLOAD, 0, True)]
    printed = capsys.readouterr()
    assert row_of(printed.out, "opevo").endswith("| 2.0 |") and "(median" not in printed.out
    assert "4 runs measured (1 vendor or peer timings alone)" in printed.err
    assert protocol.main(argv(out, "--workers", "1", "--min-repeat-ms", "1")) == 0 and len(seen) == 1


def test_the_published_table_is_what_the_committed_records_give(tmp_path, monkeypatch):
    """docs/results.md's generated section, made again from benchmarks/data/protocol/h200 by the command in its
    header: a figure edited by hand, or a record changed without publishing again, fails here."""
    page = protocol.ROOT / "docs" / "results.md"
    begin, end = protocol_publish.BEGIN, protocol_publish.END
    published = page.read_text().split(begin, 1)[1].split(end, 1)[0]
    command = next(line for line in published.splitlines() if line.startswith("Command: "))
    argv = shlex.split(command.split("`")[1])[3:]
    assert argv[0] == "--report" and "--publish" in argv
    drawn, real_plots = tmp_path / "plots", protocol_publish.plots
    written = {}

    def plots(sets, folder):  # drawn aside, so that the committed images stay as they are
        return [folder / p.name for p in real_plots(sets, drawn)]

    monkeypatch.setattr(protocol_publish, "plots", plots)
    monkeypatch.setattr(protocol_publish, "publish", lambda page, report, images: written.update(
        section=protocol_publish.section(report, images, page)))
    monkeypatch.chdir(protocol.ROOT)
    assert protocol.main(argv) == 0
    assert written["section"] == f"{begin}{published}{end}"
    assert sorted(p.name for p in drawn.iterdir()) == sorted(p.name for p in (page.parent / "protocol").iterdir())


def test_for_seconds_starts_no_run_after_them_and_the_next_invocation_runs_the_rest(tmp_path, capsys, monkeypatch):
    out, started = tmp_path / "out", []

    def one(wl, model, tuner, seed, *args, **kwargs):
        started.append((tuner, seed))
        time.sleep(2.0)
        return {"workload": WORKLOAD, "tuner": tuner, "seed": seed, "best_gflops": 1.0, "device": "CPU",
                "to_fraction": {"fraction": 0.95, "trials": 1, "seconds": 0.1}, "finished": "2026-11-28T00:00:00Z"}

    vendor = protocol_run.vendor_path(out, parse_name(WORKLOAD))
    monkeypatch.setattr(protocol_run, "one", one)
    monkeypatch.setattr(protocol_run, "baseline", lambda *args, **kwargs: {"library": "BLAS", "gflops": 2.0})
    assert protocol.main(argv(out, "--workers", "1", "--for", "6")) == 0
    first = len(started)  # a tuner's second run starts only if it would end in time, judged by its first's 2 s
    assert 1 <= first < 4 and len(list(out.rglob("*-t8-w1-s*.json"))) == first  # those under way finished
    assert f"{4 - first} runs of the tuners not recorded yet" in capsys.readouterr().err
    assert not vendor.exists()  # timed once no run of the workload waits
    assert protocol.main(argv(out, "--workers", "1")) == 0
    assert len(started) == 4 and len(set(started)) == 4  # the rest, none again
    assert "not recorded yet" not in capsys.readouterr().err and vendor.exists()


def test_for_seconds_starts_no_run_its_tuners_recorded_runs_say_would_not_end_in_time(tmp_path, capsys, monkeypatch):
    """OpEvo's recorded run took 100 s, so with 50 s left its second seed waits; NNI Random has no record, so it
    starts, and its first run's seconds then judge its second."""
    out, started = tmp_path / "out", []
    save_run(out, "opevo", 0, 40.0, workers=1, run_s=100.0)

    def one(wl, model, tuner, seed, *args, **kwargs):
        started.append((tuner, seed))
        return {"workload": WORKLOAD, "tuner": tuner, "seed": seed, "best_gflops": 1.0, "device": "CPU",
                "to_fraction": {"fraction": 0.95, "trials": 1, "seconds": 0.1}, "finished": "2026-11-28T00:00:00Z"}

    monkeypatch.setattr(protocol_run, "one", one)
    monkeypatch.setattr(protocol_run, "baseline", lambda *args, **kwargs: {"library": "BLAS", "gflops": 2.0})
    assert protocol.main(argv(out, "--workers", "1", "--for", "50")) == 0
    assert started == [("random", 0), ("random", 1)]
    assert "1 runs of the tuners not recorded yet" in capsys.readouterr().err
    assert protocol_run.load(protocol_jobs.path((workloads.Entry(WORKLOAD, "m"), "random", 1),
                                                protocol.parser().parse_args(argv(out, "--workers", "1"))))["run_s"] < 50
