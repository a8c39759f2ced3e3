"""The checked outputs gathered where the output is (trial/service/gather.py), as the check reads them."""
import numpy as np
import pytest
import tvm
from nvrtc import cuda_toolkit  # noqa: F401

from trial.build import compile_module
from trial.service import gather
from trial.verify import Reference
from trial.workload import parse


@pytest.mark.parametrize("op, spec", [("mm", "N64K16M48"), ("conv", "N2C3HW9F5K3ST1PD1"), ("mm", "N48K32M32_bf16")])
def test_the_gather_kernel_picks_what_the_check_reads(op, spec):
    wl = parse(op, spec)
    reference = Reference.of(wl, seed=3)
    positions = reference.flat_indices
    output = np.random.default_rng(0).random(wl.output_shape, dtype=np.float32).astype(wl.out_dtype)
    picks = compile_module(gather.gather_module(wl, len(positions), gpu=False), {"kind": "llvm"})
    picked = tvm.runtime.empty((len(positions),), wl.out_dtype)
    picks["main"](tvm.runtime.tensor(output), tvm.runtime.tensor(positions), picked)
    np.testing.assert_array_equal(picked.numpy().astype(np.float64), output[reference.idx].astype(np.float64))
    assert reference.check_sampled(picked.numpy()) == reference.check(output)


def test_the_gather_kernel_compiles_for_a_gpu(cuda_toolkit):  # noqa: F811
    """Bound to blocks and threads, it compiles for CUDA (NVRTC, no GPU needed)."""
    wl = parse("mm", "N512K1024M1024")
    built = compile_module(gather.gather_module(wl, 4098, gpu=True), {"kind": "cuda", "arch": "sm_90a"})
    assert "blockIdx.x" in built.mod.imports[0].inspect_source()
