"""benchmarks.unrolling off the GPU: its summary of measured rows, and its answers to bad input and to a
machine without a CUDA GPU (its measurements need a Hopper GPU: docs/results.md has them)."""
import pytest

from benchmarks import unrolling


def row(workload, hand_picked, tvm_ms, nvvm_ms, tvm_s=2.0, nvvm_s=1.0):
    return {"workload": workload, "config": {}, "hand_picked": hand_picked, "build_s_TVM": tvm_s,
            "build_s_NVVM": nvvm_s, "ms_TVM": tvm_ms, "ms_NVVM": nvvm_ms}


def test_the_summary_gives_each_workloads_build_seconds_and_time_ratios():
    rows = [row("mm/A", True, 1.0, 1.01, tvm_s=7.0), row("mm/A", False, 2.0, 1.8), row("mm/A", False, 1.0, 0.95),
            row("mm/B", True, 4.0, 4.0)]
    lines = unrolling.summary(rows).splitlines()
    assert lines[2] == "| mm/A | 3 | 11.0 | 3.0 | 0.950 | 0.900 | 1.010 | 1.010 |"
    assert lines[3] == "| mm/B | 1 | 2.0 | 1.0 | 1.000 | 1.000 | 1.000 | 1.000 |"


def test_a_bad_workload_is_refused_before_anything_is_built(capsys):
    with pytest.raises(SystemExit) as exit:
        unrolling.main(["mm/N5"])
    assert exit.value.code == 2 and "bad mm spec 'N5'" in capsys.readouterr().err


def test_without_a_cuda_gpu_it_says_so(capsys):
    assert unrolling.main(["mm/N512K1024M1024"]) == 2
    assert "no CUDA device is visible" in capsys.readouterr().err
