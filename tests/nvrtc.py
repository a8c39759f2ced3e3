"""Compile the generated CUDA as a GPU machine does, on a machine without a GPU, and read what each kernel needs.

On a GPU machine TVM compiles a kernel's CUDA source with NVRTC (`tvm.support.nvcc.compile_cuda`, which
finds the toolkit through CUDA_PATH).  Here NVRTC, the CUDA headers and ptxas come from NVIDIA's wheels
(the `test` extra), laid out as a toolkit folder for TVM; `ptxas -v` on the PTX then reports each kernel's
local memory (its stack frame), so the tests see compile errors and kernels that cannot launch, or keep
arrays in local memory, without a GPU.
"""
from __future__ import annotations

import os
import platform
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nvidia.cuda_cccl
import nvidia.cuda_nvcc
import nvidia.cuda_runtime
import pytest
from tvm.support import nvcc

LOCAL_MEMORY_PER_THREAD = 512 * 1024
"""CUDA's limit on a thread's local memory (every architecture since sm_20): a kernel whose stack frame
is larger cannot launch."""


@dataclass(frozen=True)
class KernelReport:
    """What ptxas reports for one kernel."""

    name: str
    stack_bytes: int
    registers: int
    spill_bytes: int  # spill stores


def _package_dir(package) -> Path:
    return Path(next(iter(package.__path__)))


def toolkit(folder: Path) -> Path:
    """Make `folder` a CUDA_PATH for TVM: include/ with the runtime's and the compiler's headers, and the
    CCCL headers where TVM looks for them (targets/<machine>-linux/include/cccl)."""
    include = folder / "include"
    include.mkdir()
    for package in (nvidia.cuda_runtime, nvidia.cuda_nvcc):
        for entry in (_package_dir(package) / "include").iterdir():
            if not (include / entry.name).exists():
                (include / entry.name).symlink_to(entry)
    target = folder / "targets" / f"{platform.machine()}-linux" / "include"
    target.mkdir(parents=True)
    (target / "cccl").symlink_to(_package_dir(nvidia.cuda_cccl) / "include")
    return folder


@pytest.fixture(scope="module")
def cuda_toolkit(tmp_path_factory):
    """A `toolkit` folder as TVM's CUDA_PATH for a module's tests (import it into the module, or use it
    autouse there)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDA_PATH", str(toolkit(Path(tmp_path_factory.mktemp("cuda")))))
        yield


def ptx(source: str, arch: str) -> str:
    """The PTX that NVRTC makes of `source` for `arch`, through TVM as on a GPU machine.  CUDA_PATH must
    name a `toolkit` folder."""
    return bytes(nvcc.compile_cuda(source, target_format="ptx", arch=arch)).decode()


def compile_kernels(source: str, arch: str) -> list[KernelReport]:
    """NVRTC (through TVM, as on a GPU machine) to PTX, then ptxas for `arch` ("sm_90"); raises on an error
    of either, with the compiler's message.  CUDA_PATH must name a `toolkit` folder."""
    with tempfile.TemporaryDirectory(prefix="ptx-") as folder:
        path = Path(folder) / "kernels.ptx"
        path.write_text(ptx(source, arch))
        done = subprocess.run([str(_package_dir(nvidia.cuda_nvcc) / "bin" / "ptxas"), f"-arch={arch}", "-v",
                               str(path), "-o", os.devnull], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ptxas failed for {arch}: {done.stderr.strip()}")
    return _reports(done.stderr + done.stdout)


def _reports(info: str) -> list[KernelReport]:
    """One report per "Compiling entry function" section of ptxas -v."""
    return [KernelReport(re.match(r"'(\w+)'", section).group(1),
                         int(re.search(r"(\d+) bytes stack frame", section).group(1)),
                         int(re.search(r"Used (\d+) registers", section).group(1)),
                         int(re.search(r"(\d+) bytes spill stores", section).group(1)))
            for section in info.split("Compiling entry function ")[1:]]
