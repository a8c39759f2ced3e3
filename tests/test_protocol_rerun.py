"""Which records of the benchmark protocol run again: those of a template the suite no longer picks for their
workload, and those of a space since changed (`benchmarks.protocol_jobs.current`); a convolution's vendor figure
of one cuDNN search, and a peer's of one, or dividing by one (`protocol_run.peer_searched_alike`)."""
import argparse
import json

from benchmarks import protocol, protocol_jobs, protocol_run
from benchmarks.workloads import Entry
from trial.measure import Options
from trial.workload import parse_name

WORKLOAD = "mm/N32K32M32"


def rerun(tmp_path, capsys, monkeypatch, edit):
    """Three seeds of NNI Random on WORKLOAD on the CPU, their records changed by `edit(records, wl)`, then the same
    command again: the seeds it ran, what it printed, and the records' paths."""
    command = ["--workloads", WORKLOAD, "--tuners", "random", "--seeds", "3", "--trials", "3", "--target", "llvm",
               "--min-repeat-ms", "1", "--out", str(tmp_path / "out"), "--no-progress"]
    wl = parse_name(WORKLOAD)
    assert protocol.main(command) == 0
    saved = [protocol_run.path(tmp_path / "out", wl, "random", seed, 3, protocol.registry.CONCURRENCY)
             for seed in range(3)]
    records = [json.loads(p.read_text()) for p in saved]
    edit(records, wl)
    for target, record in zip(saved, records):
        protocol_run.save(target, record)
    real, calls = protocol_run.one, []

    def counted(wl, model, tuner, seed, *args, **kwargs):
        calls.append(seed)
        return real(wl, model, tuner, seed, *args, **kwargs)

    monkeypatch.setattr(protocol_run, "one", counted)
    capsys.readouterr()
    assert protocol.main(command) == 0
    return calls, capsys.readouterr().err, saved


def test_a_record_whose_best_config_is_of_a_template_no_longer_picked_runs_again(tmp_path, capsys, monkeypatch):
    """Each record names its best config's template; a record whose template the suite no longer picks for the
    workload on the device (here: a Hopper float32 config, on the CPU) runs again, whether it names its template
    or, written before records did, its best config says it; the others stand."""
    from trial.templates import simt

    def edit(records, wl):
        assert {r["template"] for r in records} == {"matmul"}
        records[0]["template"] = "simt"
        records[1].pop("template")
        records[2].pop("template")
        records[2]["best_params"] = simt.default_params(wl, True)

    calls, err, saved = rerun(tmp_path, capsys, monkeypatch, edit)
    assert calls == [0, 2] and "2 runs measured" in err
    assert [json.loads(p.read_text()).get("template") for p in saved] == ["matmul", None, "matmul"]


def test_a_record_of_a_space_since_changed_runs_again(tmp_path, capsys, monkeypatch):
    """Each record keeps a fingerprint of the space its template searched on the workload; a record whose
    fingerprint is not the space's now (a value since added for its shape) runs again; one with the same stands,
    as does one written before records kept it."""
    other = parse_name("mm/N64K64M128")

    def edit(records, wl):
        assert {r["space"] for r in records} == {protocol_run.space_of(wl, "matmul")}
        assert protocol_run.space_of(wl, "matmul") != protocol_run.space_of(other, "matmul")
        records[1]["space"] = protocol_run.space_of(other, "matmul")
        records[2].pop("space")

    calls, err, saved = rerun(tmp_path, capsys, monkeypatch, edit)
    assert calls == [1] and "1 runs measured" in err
    assert json.loads(saved[1].read_text())["space"] == protocol_run.space_of(parse_name(WORKLOAD), "matmul")


def test_a_report_leaves_out_the_records_that_run_again(tmp_path, capsys):
    """On the target each record names, a run of a template the suite has since replaced for its workload (the
    portable one where Hopper now takes float32 mm on `simt`) is left out of the report's row and counted apart;
    a run of the template picked there stands, as does one on the CPU and one that names no target."""
    out, name = tmp_path / "records", "mm/N64K64M64"
    kept = [("simt", "cuda sm_90"), ("matmul", "llvm"), ("matmul", None)]
    for seed, (template, target) in enumerate([*kept, ("matmul", "cuda sm_90")]):
        record = {"workload": name, "tuner": "random", "seed": seed, "best_gflops": 10.0 + seed, "template": template,
                  "device": "NVIDIA H200", "finished": f"2026-11-30T12:0{seed}:00Z",
                  "to_fraction": {"fraction": 0.95, "trials": 5, "seconds": 1.5},
                  **({"target": target} if target else {})}
        protocol_run.save(protocol_run.path(out, parse_name(name), "random", seed, 8, 16), record)
    assert protocol.main(["--workloads", name, "--tuners", "random", "--seeds", "4", "--trials", "8", "--target",
                          "llvm", "--out", str(out), "--no-peer", "--report"]) == 0
    text = capsys.readouterr().out
    assert ("Runs: 3 of the 4 planned runs of the tuners are recorded (1 more, of a template the suite has since "
            "replaced for their workload, are left out and run again)") in text
    row = next(line for line in text.splitlines() if line.startswith(f"| {name} |") and "| random |" in line)
    assert "| random | 3 | 11.0 [10.0, 12.0] |" in row and "| matmul x2, simt x1 |" in row


def test_a_convolutions_vendor_figure_of_one_cudnn_search_is_timed_again_and_the_peer_that_divides_by_it(
        tmp_path, monkeypatch):
    """A convolution's vendor record without its searches ("searches": from before a figure was the fastest of
    several cuDNN searches) is timed again, and so is a peer whose own figure, or library figure, has none; a
    matmul's records, a convolution's of several searches and a peer's that failed to compile, stand."""
    names = ["conv/N2C4HW9F6K3ST2PD1", "conv/N1C4HW7F8K3ST1PD1", "mm/N16K16M16", "conv/N1C4HW7F8K1ST1PD0",
             "conv/N1C4HW9F8K1ST1PD0"]
    searches = [{}, {"searches": [1.0, 2.0]}, {}, {"searches": [1.0]}, {"searches": [1.0]}]
    compiled = [{}, {"searches": [1.0]}, {}, {}, {"error": "Inductor failed"}]  # the 4th: its own figure of one
    for name, extra, own in zip(names, searches, compiled):
        wl = parse_name(name)
        protocol_run.save(protocol_run.vendor_path(tmp_path, wl), {"library": "old", "gflops": 1.0, **extra})
        protocol_run.save(protocol_run.peer_path(tmp_path, wl),
                          {"gflops": 1.0, **own, "vendor": {"library": "old", "gflops": 1.0, **extra}})
    timed = []

    def baseline(wl, target, repeat, min_repeat_ms, compile_mode=None):
        timed.append((wl.name, compile_mode))
        return {"library": "new", "gflops": 2.0, "searches": [0.5]}

    monkeypatch.setattr(protocol_run, "baseline", baseline)
    monkeypatch.setattr(protocol_jobs, "device", lambda kind: "llvm")
    args, entries = argparse.Namespace(out=tmp_path, target="llvm"), [Entry(name, "model") for name in names]
    assert protocol_jobs.alone_missing("vendor", entries, args, Options(), [], deadline=False) == 1
    assert protocol_jobs.alone_missing(protocol_run.PEER, entries, args, Options(), [], deadline=False) == 2
    assert timed == [(names[0], None), (names[0], protocol_run.COMPILE_MODE), (names[0], None),
                     (names[3], protocol_run.COMPILE_MODE), (names[3], None)]
    libraries = [protocol_run.load(protocol_run.vendor_path(tmp_path, parse_name(n)))["library"] for n in names]
    assert libraries == ["new", "old", "old", "old", "old"]
    peers = [protocol_run.load(protocol_run.peer_path(tmp_path, parse_name(n)))["vendor"]["library"] for n in names]
    assert peers == ["new", "old", "old", "new", "old"]


def test_a_timing_alone_that_would_not_end_within_for_does_not_start(tmp_path, monkeypatch):
    """Under --for, a peer is timed only if it would end in time, as long as its earlier record took ("alone_s",
    else "compile_s"), else the median of those recorded; each timing saves how long it took."""
    import time

    names = ["conv/N1C4HW7F8K3ST1PD1", "conv/N2C4HW9F6K3ST2PD1", "conv/N1C4HW9F8K1ST1PD0", "conv/N1C4HW7F8K1ST1PD0"]
    searched = {"searches": [1.0]}
    earlier = [{**searched, "vendor": searched, "alone_s": 100.0},  # stands: not timed again
               {"compile_s": 20.0, "vendor": {}},  # of one search: timed again, in 20 s
               {"alone_s": 90.0, "vendor": {}}]  # would take 90 s: left
    for name, record in zip(names, earlier):
        protocol_run.save(protocol_run.peer_path(tmp_path, parse_name(name)), {"gflops": 1.0, **record})
    timed = []

    def baseline(wl, target, repeat, min_repeat_ms, compile_mode=None):
        if compile_mode:
            timed.append(wl.name)
        return {"library": "new", "gflops": 2.0, **searched}

    monkeypatch.setattr(protocol_run, "baseline", baseline)
    monkeypatch.setattr(protocol_jobs, "device", lambda kind: "llvm")
    entries = [Entry(name, "model") for name in names]
    args = argparse.Namespace(out=tmp_path, target="llvm", deadline=time.monotonic() + 60)
    assert protocol_jobs.alone_missing(protocol_run.PEER, entries, args, Options(), []) == 1
    assert timed == [names[1]]  # the last, with no record, would take the median, 90 s: left too
    assert protocol_run.load(protocol_run.peer_path(tmp_path, parse_name(names[1])))["alone_s"] >= 0
    args.deadline = None
    assert protocol_jobs.alone_missing(protocol_run.PEER, entries, args, Options(), []) == 2
    assert timed == [names[1], names[2], names[3]]
