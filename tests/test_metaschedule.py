"""MetaSchedule as a peer (benchmarks/metaschedule.py): the search arguments a compare label gives it, and build
workers that hold no GPU."""
import os
import re

import pytest

from benchmarks import compare, metaschedule, metaschedule_child
from trial import devicelock
from trial.measure import Options
from trial.service.worker import DEVICE_VARIABLES
from trial.workload import parse


def test_a_metaschedule_label_sets_its_search(tmp_path):
    """`metaschedule[...]` hands its arguments to MetaSchedule's evolutionary search (with a population of 4
    it samples 4 schedules a round, where its default samples 512) and reports the run under that label;
    an argument the search does not have is refused before any run starts."""
    with pytest.raises(ValueError, match="unknown MetaSchedule search argument"):
        compare.plan(["metaschedule[bogus=1]"], 1)
    label = "metaschedule[population_size=4,init_min_unmeasured=1]"
    assert compare.plan([label], 1) == [(label, 0)]
    run = metaschedule.run(parse("mm", "N32K32M32"), 8, 0, tmp_path, Options(target="llvm", min_repeat_ms=1),
                           False, label)
    assert run.tuner == label and run.trials and run.final.status == "ok"
    # its fastest schedules, each compiled through TVM's pipeline and the suite's and timed by the suite: the
    # run's figure is the fastest of them
    pipelines = metaschedule_child.PIPELINES
    assert all(f.status == "ok" for f in run.finalists) and run.final.gflops == max(f.gflops for f in run.finalists)
    ranks = len(run.finalists) // len(pipelines)
    assert 1 <= ranks <= metaschedule.FINALISTS and len(run.finalists) == ranks * len(pipelines)
    assert [f.extra["pipeline"] for f in run.finalists] == list(pipelines) * ranks
    assert sorted(p.name for p in tmp_path.glob("best-*.so")) == sorted(
        f"best-{i}-{p}.so" for i in range(ranks) for p in pipelines)
    assert len({f.extra["trace"] for f in run.finalists}) == ranks  # distinct schedules
    logs = "".join(path.read_text() for path in (tmp_path / "logs").glob("*.log"))
    sampled = [int(n) for n in re.findall(r"Sampled (\d+) candidate", logs)]
    assert sampled and max(sampled) <= 4, sampled


def test_metaschedules_build_workers_start_with_no_gpu_in_sight(monkeypatch):
    """MetaSchedule's LocalBuilder starts its worker processes as it builds; each opened a CUDA context where it
    saw a GPU (16 of 518 MiB on an H100 machine): the builder hides the devices from them, and only from them."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    seen = []

    class Inner:
        def build(self, build_inputs):
            seen.append({name: os.environ.get(name) for name in DEVICE_VARIABLES})
            return []

    TimedBuilder, _, _ = metaschedule_child._classes()
    assert list(TimedBuilder(Inner()).build([])) == []
    assert seen == [dict.fromkeys(DEVICE_VARIABLES, "")]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3" and "HIP_VISIBLE_DEVICES" not in os.environ


def test_metaschedules_builds_hold_the_cpu_from_timings():
    """MetaSchedule's builds, like the measuring service's, keep CPU kernels from being timed beside them."""
    busy = []

    class Busy(Exception):
        pass

    def waiting():
        raise Busy

    class Inner:
        def build(self, build_inputs):
            try:
                with devicelock.cores(exclusive=True, waiting=waiting):
                    busy.append(False)
            except Busy:
                busy.append(True)
            return []

    TimedBuilder, _, _ = metaschedule_child._classes()
    TimedBuilder(Inner()).build([])
    assert busy == [True]


def test_metaschedules_candidates_are_verified_and_timed_by_the_measuring_service(tmp_path):
    """Its candidates go to the measuring service's runners, all of a batch at once (on a GPU host, every GPU
    takes them), and are timed and verified as the suite's kernels are: a wrong output fails the candidate."""
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from trial.measure import measure

    wl, options = parse("mm", "N32K32M32"), Options(target="llvm", min_repeat_ms=1)
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.mkdir(), wrong.mkdir()
    assert measure(wl, None, options, keep=right).status == "ok"
    assert measure(wl, None, Options(**{**options.__dict__, "template": "faulty_templates:Wrong"}),
                   keep=wrong).status == "wrong_result"
    _, ServiceRunner, _ = metaschedule_child._classes()
    runner = ServiceRunner(wl, options)
    inputs = [RunnerInput(str(folder / "kernel.so"), "cpu", []) for folder in (right, wrong)]
    ok, failed = [future.result() for future in runner.run(inputs)]
    assert ok.error_msg is None and len(ok.run_secs) == options.repeat and all(float(s) > 0 for s in ok.run_secs)
    assert failed.run_secs is None and failed.error_msg.startswith("wrong_result: ")
    assert runner.seconds > 0


def test_metaschedules_kernels_get_cp_async_and_the_opt_in_shared_memory_on_cuda():
    """TVM leaves cp.async and the merge of static shared memory off; a CUDA user turns them on for sm_80+,
    and the merge lets a kernel use the shared memory a block may opt into, the limit its rules are given."""
    import tvm

    from trial.target import DeviceLimits, Target

    def cuda(arch):
        return tvm.target.Target({"kind": "cuda", "arch": arch})

    assert metaschedule_child.pass_config(cuda("sm_90a")) == {"tirx.use_async_copy": True,
                                                               "tirx.merge_static_smem": True}
    assert metaschedule_child.pass_config(cuda("sm_75"))["tirx.use_async_copy"] is False
    assert metaschedule_child.pass_config(tvm.target.Target("llvm")) == {}
    limits = DeviceLimits(1024, (1024, 1024, 64), 48 << 10, 65536, 255, 32, 227 << 10)
    h100 = Target("cuda", {"kind": "cuda", "arch": "sm_90a"}, "NVIDIA H100", 1, limits)
    assert int(metaschedule_child._ms_target(h100).attrs["max_shared_memory_per_block"]) == 227 << 10


def test_a_run_in_a_share_of_the_host_runs_on_its_cpus(tmp_path):
    """In a share (benchmarks/placement.py) its process, and so its builder's workers, run on the share's CPUs:
    a share of a CPU this host does not have ends the run before it measures anything."""
    import os as host

    from benchmarks.placement import Share

    label, options = "metaschedule[population_size=4,init_min_unmeasured=1]", Options(target="llvm", min_repeat_ms=1)
    mine = Share("", (min(host.sched_getaffinity(0)),), 1)
    run = metaschedule.run(parse("mm", "N32K32M32"), 4, 0, tmp_path / "mine", options, False, label, 1, mine)
    assert run.trials and run.final.status == "ok", run.final.reason
    absent = Share("", (host.cpu_count() + 64,), 1)
    run = metaschedule.run(parse("mm", "N32K32M32"), 4, 0, tmp_path / "absent", options, False, label, 1, absent)
    assert not run.trials and run.final.status == "runtime_error" and "exited with code 1" in run.final.reason
