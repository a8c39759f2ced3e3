"""The records store: concurrent and interrupted writers, best/list, export of a verified library."""
import json
import multiprocessing as mp
import os
import signal
import sqlite3
import time

import numpy as np
import pytest
import tvm

from trial import verify
from trial.records import cli
from trial.measure import Options, measure
from trial.results import MeasureResult
from trial.records import Records
from trial.templates.common import PIPELINE_DEPTHS
from trial.templates.matmul import UNROLL_STEPS, VECTOR_WIDTHS
from trial.workload import parse

WL = parse("mm", "N32K32M32")


def knobs(i: int) -> dict:
    """Valid knobs of WL, distinct for i < 45."""
    return {"K": [1, 2, 4, 4], "X": [2, 1, 4, 4], "Y": [1, 2, 2, 8], "unroll": UNROLL_STEPS[i % 5],
            "vec": VECTOR_WIDTHS[i // 5 % 3], "pipeline": PIPELINE_DEPTHS[i // 15 % 3], "kmajor": 0, "pad": 0}


def fake(gflops: float, i: int = 0, status: str = "ok", device: str = "gpu A") -> MeasureResult:
    return MeasureResult(status, "" if status == "ok" else "why", knobs(i), gflops,
                         1.0 / max(gflops, 1e-9) if status == "ok" else None, 0.0, 0.1, "cuda sm_90", device)


def _writer(path: str, worker: int, count: int) -> None:
    store = Records(path)
    for i in range(count):
        store.append(WL, fake(float(i), worker * 1000 + i), "exp", f"w{worker}-{i}")


def test_concurrent_appends_lose_nothing(tmp_path):
    path = str(tmp_path / "r.sqlite")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 60)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    rows = Records(path).query()
    assert len(rows) == 240
    assert len({r.trial for r in rows}) == 240


def _endless_writer(path: str) -> None:
    store = Records(path)
    i = 0
    while True:
        store.append(WL, fake(1.0, i), "exp", f"t{i}")
        i += 1


def test_a_killed_writer_leaves_a_readable_store(tmp_path):
    path = str(tmp_path / "r.sqlite")
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_endless_writer, args=(path,))
    proc.start()
    deadline = time.monotonic() + 60
    while (not os.path.exists(path) or len(Records(path).query(limit=30)) < 30) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = Records(path).query()
    assert len(rows) >= 30
    assert sorted(int(r.trial[1:]) for r in rows) == list(range(len(rows)))  # no gap, no torn record
    Records(path).append(WL, fake(2.0), "exp", "after")  # and it takes new records


def test_best_is_per_workload_device_and_distinct(tmp_path):
    store = Records(tmp_path / "r.sqlite")
    store.append(WL, fake(10.0, 1))
    store.append(WL, fake(30.0, 2))
    store.append(WL, fake(30.0, 2))  # the same config measured again
    store.append(WL, fake(99.0, 3, status="wrong_result"))
    store.append(WL, fake(50.0, 4, device="gpu B"))
    store.append(parse("mm", "N32K32M32PNT"), fake(70.0, 5))
    best = store.best(WL.key, "gpu A", n=5)
    assert [r.gflops for r in best] == [30.0, 10.0]
    assert store.best(WL.key, None, n=1)[0].device == "gpu B"
    assert store.append(WL, fake(1.0), "exp", "t1") and not store.append(WL, fake(1.0), "exp", "t1")


def test_export_writes_a_verified_library(tmp_path):
    store = Records(tmp_path / "r.sqlite")
    params = {"K": [2, 1, 4, 4], "X": [2, 1, 4, 4], "Y": [1, 2, 2, 8], "unroll": 16, "vec": 1, "pipeline": 0,
              "kmajor": 0, "pad": 0}
    result = measure(WL, params, Options(target="llvm", min_repeat_ms=1))
    assert result.status == "ok"
    store.append(WL, result, "exp", "t0", "opevo")
    out = tmp_path / "export"
    code = cli.main(["--records", str(store.path), "export", "mm/N32K32M32", "--out", str(out),
                         "--target", "llvm"])
    assert code == 0
    assert {"kernel.so", "kernel.ll", "kernel.s", "params.json", "report.json"} <= {p.name for p in out.iterdir()}
    report = json.loads((out / "report.json").read_text())
    assert report["params"] == params and report["tuner"] == "opevo" and report["experiment"] == "exp"
    assert report["tuned"]["gflops"] > 0 and report["baseline"]["gflops"] > 0 and report["improvement"] > 0
    assert report["trials"] == 1

    lib = tvm.runtime.load_module(str(out / "kernel.so"))  # what a user of the export does
    reference = verify.Reference.of(WL, seed=3)
    inputs = reference.inputs
    dev = tvm.cpu()
    c = tvm.runtime.tensor(np.zeros(WL.output_shape, "float32"), dev)
    lib["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], c)
    assert reference.check(c.numpy()) is None
    np.testing.assert_allclose(c.numpy(), inputs[0].astype(np.float64) @ inputs[1], rtol=1e-4, atol=1e-4)


def test_export_refuses_a_record_of_another_device(tmp_path, capsys):
    store = Records(tmp_path / "r.sqlite")
    store.append(WL, fake(10.0, 1, device="NVIDIA H100"))
    assert cli.main(["--records", str(store.path), "best", "mm/N32K32M32", "--target", "llvm"]) == 1
    assert "no verified record" in capsys.readouterr().out
    code = cli.main(["--records", str(store.path), "export", "mm/N32K32M32", "--device", "NVIDIA H100",
                         "--target", "llvm", "--out", str(tmp_path / "x")])
    assert code == 2
    assert "measured on 'NVIDIA H100'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_records_of_knobs_the_template_no_longer_has_are_skipped(tmp_path, capsys):
    """best and export pass over them (as warm start and `make tune` do); export() itself refuses them."""
    from trial.records.export import ExportError, export
    from trial.target import resolve

    store = Records(tmp_path / "r.sqlite")
    old = {"K": [2, 4, 4], "X": [2, 1, 4, 4], "Y": [1, 2, 2, 8], "unroll": 16, "vec": 1}  # K had 3 parts
    store.append(WL, MeasureResult("ok", params=old, gflops=10.0, latency_ms=0.01, target="llvm",
                                   device=resolve("llvm").device_name), "exp", "t0")
    for extra in ([], ["--out", str(tmp_path / "x")]):
        command = "export" if extra else "best"
        assert cli.main(["--records", str(store.path), command, "mm/N32K32M32", "--target", "llvm", *extra]) == 1
        assert "no verified record of mm/N32K32M32PNN on" in capsys.readouterr().out
    assert not (tmp_path / "x").exists()
    with pytest.raises(ExportError, match="recorded knobs do not fit the template on this device: .*"
                                          "K: expected 4 factors, got 3"):
        export(WL, store.query(WL.key)[0], tmp_path / "x", "llvm")
    assert not (tmp_path / "x").exists()


def test_tune_says_a_tuned_kernel_exists_instead_of_tuning_again(tmp_path, capsys):
    from experiments import tune, write
    from trial.target import resolve

    folder = write.write(WL, tmp_path / "experiments", max_trials=4, concurrency=1)
    result = fake(42.0, 1, device=resolve("auto").device_name)
    Records().append(WL, result, "exp0", "t0", "opevo")  # the default store, as the trials use it
    stale = MeasureResult("ok", params={**knobs(1), "K": [2, 4, 4]}, gflops=99.0, device=result.device)
    Records().append(WL, stale, "exp0", "t1", "opevo")  # faster, but of knobs the template no longer has
    assert tune.main([str(folder / "config_opevo.yml"), "--port", "1"]) == 0  # port 1: nothing may start
    out = capsys.readouterr().out
    assert "a tuned kernel of mm/N32K32M32PNN" in out and "42.0 GFLOPS" in out
    assert "python -m trial.records export mm/N32K32M32PNN" in out and "RETUNE=1" in out


def test_tune_looks_for_a_tuned_kernel_on_the_device_its_trials_use(tmp_path, monkeypatch):
    """A kernel recorded on this machine's device does not count for an experiment whose trials measure
    behind an RPC runner: with no tracker answering, that device is unknown and the experiment starts."""
    from experiments import tune, write
    from trial.target import resolve

    folder = write.write(WL, tmp_path / "experiments", max_trials=4, concurrency=1, arch="auto",
                         runner="rpc://127.0.0.1:9/nothing")
    Records().append(WL, fake(42.0, 1, device=resolve("auto").device_name), "exp0", "t0", "opevo")

    def create(config, port):
        raise RuntimeError("starts")

    monkeypatch.setattr(tune, "create", create)
    with pytest.raises(RuntimeError, match="starts"):
        tune.main([str(folder / "config_opevo.yml"), "--port", "1"])


def test_a_bad_workload_name_is_a_clear_error(tmp_path, capsys):
    for argv in (["list", "--workload", "mm"], ["best", "mm/N0K1M1"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["--records", str(tmp_path / "r.sqlite"), *argv])
        assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "expected op/spec, e.g. mm/N512K1024M1024, got 'mm'" in err and "N0K1M1" in err


def test_a_store_from_before_warnings_reads_and_takes_them_and_keeps_its_columns(tmp_path):
    """A store written before measurements carried a warning: its records read with none, new ones keep
    theirs, and its measurements keep their columns, which an older checkout reads positionally."""
    path = tmp_path / "old.sqlite"
    columns = ("time REAL NOT NULL, workload TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL, params TEXT "
               "NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL, gflops REAL NOT NULL, latency_ms REAL, latency_std_ms "
               "REAL, build_s REAL, experiment TEXT, trial TEXT, tuner TEXT")
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE measurements (id INTEGER PRIMARY KEY, {columns})")
        db.execute("INSERT INTO measurements (time, workload, target, device, params, status, reason, gflops) VALUES "
                   "(1.0, ?, 'llvm', 'gpu A', ?, 'ok', '', 5.0)", (WL.key, json.dumps(knobs(0))))
    store = Records(path)
    store.append(WL, MeasureResult("ok", "", knobs(1), 7.0, device="gpu A", warning="busy CPU: ..."), "exp", "t1")
    store.append(WL, MeasureResult("ok", "", knobs(2), 6.0, device="gpu A"), "exp", "t2")
    assert [(r.gflops, r.warning) for r in store.query(WL.key, best_first=True)] == \
        [(7.0, "busy CPU: ..."), (6.0, ""), (5.0, "")]
    with sqlite3.connect(path) as db:
        assert {len(row) for row in db.execute("SELECT * FROM measurements")} == {15}

