"""Shares of a host for MetaSchedule's runs side by side: a GPU and whole physical cores of their own."""
import json
import threading

import pytest

from benchmarks import placement, protocol, protocol_run


def fake_sysfs(tmp_path, threads_of_core):
    """A /sys/devices/system/cpu where cpu N belongs to core threads_of_core[N] of package 0."""
    for cpu, core in enumerate(threads_of_core):
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    return tmp_path


def test_a_cores_hardware_threads_stay_together_and_each_share_gets_whole_cores(tmp_path):
    # 8 logical CPUs, 4 cores: cpu N and cpu N + 4 are one core's two threads, as Linux numbers them
    sysfs = fake_sysfs(tmp_path, [0, 1, 2, 3, 0, 1, 2, 3])
    cores = placement.physical_cores(set(range(8)), sysfs)
    assert cores == [[0, 4], [1, 5], [2, 6], [3, 7]]
    two = placement.shares(2, ["2", "3"], cores)
    assert [(s.gpus, s.cpus, s.cores) for s in two] == [("2", (0, 4, 1, 5), 2), ("3", (2, 6, 3, 7), 2)]
    three = placement.shares(3, ["0", "1", "2"], cores)  # the remainder to the first share
    assert [s.cpus for s in three] == [(0, 4, 1, 5), (2, 6), (3, 7)]
    assert not set(three[0].cpus) & set(three[1].cpus)
    assert placement.physical_cores({0, 1}, tmp_path / "absent") == [[0], [1]]  # no topology: a CPU a core


def test_more_runs_than_gpus_or_cores_is_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match="need a GPU each; 1 visible"):
        placement.shares(2, ["0"], [[0], [1]])
    with pytest.raises(ValueError, match="need a core each; 1 usable"):
        placement.shares(2, ["0", "1"], [[0]])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert placement.visible_gpus(2) == ["3", "5"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert placement.visible_gpus(3) == ["0", "1", "2"]


def test_metaschedule_runs_side_by_side_each_in_a_share_of_its_own(tmp_path, capsys, monkeypatch):
    """--metaschedule-parallel 2: MetaSchedule's runs two at a time, never two in one share, each record
    naming its share; the suite's tuners' runs get none."""
    given = [placement.Share("0", (0,), 1), placement.Share("1", (1,), 1)]
    monkeypatch.setattr(protocol, "shares", lambda args: given if args.metaschedule_parallel > 1 else None)
    in_use, clash, most, lock = set(), [], [0], threading.Lock()

    def fake_one(wl, model, tuner, seed, *args, share=None, **kwargs):
        with lock:
            clash.append(share in in_use)
            in_use.add(share)
            most[0] = max(most[0], len(in_use))
        threading.Event().wait(0.2)
        with lock:
            in_use.discard(share)
        return {"workload": wl.name, "tuner": tuner, "seed": seed, "best_gflops": 1.0, "ratio": None,
                "to_fraction": {"trials": 1, "seconds": 0.1}, **({"share": share.describe()} if share else {})}

    monkeypatch.setattr(protocol_run, "one", fake_one)
    out = tmp_path / "out"
    assert protocol.main(["--workloads", "mm/N32K32M32", "--tuners", "metaschedule", "random", "--seeds", "4",
                          "--trials", "2", "--workers", "1", "--metaschedule-parallel", "2", "--target", "llvm",
                          "--no-peer", "--out", str(out), "--no-progress"]) == 0
    records = [json.loads(p.read_text()) for p in out.rglob("*.json")]
    ms = [r for r in records if r["tuner"] == "metaschedule"]
    assert len(ms) == 4 and not any(clash) and most[0] == 2 and {r["parallel"] for r in ms} == {2}
    assert {r["share"]["gpus"] for r in ms} <= {"0", "1"}
    assert all("share" not in r for r in records if r["tuner"] == "random")
    capsys.readouterr()


def test_metaschedule_side_by_side_on_a_host_without_gpus_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        protocol.main(["--workloads", "mm/N32K32M32", "--tuners", "metaschedule", "--metaschedule-parallel", "2",
                       "--target", "llvm", "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2 and "need a GPU each; 0 visible" in capsys.readouterr().err
