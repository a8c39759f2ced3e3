"""Where kernels run: a TVM target plus the limits of the device behind it.

`resolve("auto")` takes a CUDA GPU if one is present (arch from the device, e.g. sm_90), else a ROCm
GPU, else the host CPU through LLVM; given an RPC session it asks the remote machine the same way.
Querying a GPU creates a driver context, so only a device's runner in the measuring service calls
this (trial/service/runner.py); the service leaves what it found in a small cache (`save` / `load`)
from which trials check knobs against the device's limits.
TVM is imported only where a device is queried, so trials do not pay for it.
"""
from __future__ import annotations

import ctypes
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from .devicelock import lock_dir
from .remote import LOCAL

KINDS = ("auto", "cuda", "rocm", "llvm")
_MAX_REGISTERS_PER_BLOCK = 9  # TVM's DeviceAttrKind::kMaxRegistersPerBlock
_CU_MAX_SHARED_PER_BLOCK_OPTIN = 97  # CUDA's CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
OPTIN_SHARED_BYTES = {"sm_70": 96 * 1024, "sm_75": 64 * 1024, "sm_80": 163 * 1024, "sm_86": 99 * 1024,
                      "sm_87": 163 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024}
"""Opt-in shared memory per block by architecture (the CUDA programming guide's table), for devices
that cannot be asked: GPUs behind an RPC server, and experiments written for a GPU that is not here."""


class TargetError(RuntimeError):
    """The requested target has no device on this machine."""


@dataclass(frozen=True)
class DeviceLimits:
    max_threads_per_block: int
    max_thread_dims: tuple[int, int, int]
    max_shared_memory_per_block: int
    max_registers_per_block: int
    max_registers_per_thread: int
    warp_size: int
    max_shared_memory_per_block_optin: int = 0
    """Dynamic shared memory a block may opt into (CUDA's ..._PER_BLOCK_OPTIN); 0 where it is no more
    than the static limit."""

    @property
    def shared_memory_per_block(self) -> int:
        """The most shared memory one block can have, statically or dynamically."""
        return max(self.max_shared_memory_per_block, self.max_shared_memory_per_block_optin)


@dataclass(frozen=True)
class Target:
    """A kind (cuda/rocm/llvm), the TVM target dict and, for GPUs, how many devices and their limits."""

    kind: str
    target: dict[str, Any]
    device_name: str
    num_devices: int
    limits: DeviceLimits | None
    memory_bytes: int | None = None
    """Global memory of one device (the host's memory for llvm); None where unknown."""

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("cuda", "rocm")

    @property
    def label(self) -> str:
        """The kind and architecture, as measurements report the target, e.g. 'cuda sm_90'."""
        return f"{self.kind} {self.target.get('arch') or self.target.get('mcpu', '')}".strip()

    @property
    def cuda_arch(self) -> int:
        """The CUDA compute capability as a number (sm_90 -> 90; sm_90a -> 90), 0 for other kinds."""
        return int(self.target["arch"].removeprefix("sm_").rstrip("a")) if self.kind == "cuda" else 0

    @property
    def async_copy(self) -> bool:
        """Whether kernels can copy global to shared memory asynchronously (cp.async: CUDA sm_80+)."""
        return self.cuda_arch >= 80

    @property
    def device_type(self) -> str:
        """The kind of device the kernels run on, as TVM names it ('cpu' for llvm)."""
        return "cpu" if self.kind == "llvm" else self.kind

    def device(self, index: int = 0) -> Any:
        import tvm

        return tvm.runtime.device(self.device_type, index)

    def describe(self) -> dict[str, Any]:
        """Plain JSON data; `from_description` makes the Target again."""
        return {"kind": self.kind, "target": self.target, "device_name": self.device_name,
                "num_devices": self.num_devices, "limits": asdict(self.limits) if self.limits else None,
                "memory_bytes": self.memory_bytes}

    @classmethod
    def from_description(cls, d: dict[str, Any]) -> Target:
        limits = d["limits"]
        if limits:
            limits = DeviceLimits(**{**limits, "max_thread_dims": tuple(limits["max_thread_dims"])})
        return cls(d["kind"], d["target"], d["device_name"], d["num_devices"], limits, d.get("memory_bytes"))


def _count(make_device: Any) -> int:
    n = 0
    while make_device(n).exist:
        n += 1
    return n


def _gpu_limits(dev: Any, optin: int = 0) -> DeviceLimits:
    dims = dev.max_thread_dimensions
    regs = dev._GetDeviceAttr(dev.dlpack_device_type(), dev.index, _MAX_REGISTERS_PER_BLOCK) or 65536
    return DeviceLimits(dev.max_threads_per_block, tuple(dims), dev.max_shared_memory_per_block,
                        int(regs), 255, dev.warp_size, optin)


def _cuda_optin_shared(index: int, arch: str) -> int:
    """The CUDA driver's opt-in shared memory per block of device `index` (TVM does not ask for it);
    the architecture's published figure if the driver cannot say."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        device, value = ctypes.c_int(), ctypes.c_int()
        if not (cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), index) or
                cuda.cuDeviceGetAttribute(ctypes.byref(value), _CU_MAX_SHARED_PER_BLOCK_OPTIN, device)):
            return value.value
    except OSError:
        pass
    return OPTIN_SHARED_BYTES.get(arch, 0)


def _cuda(host: Any) -> Target | None:
    import tvm

    n = _count(host.cuda)
    if n == 0:
        return None
    dev = host.cuda(0)
    arch = "sm_" + dev.compute_version.replace(".", "")
    optin = _cuda_optin_shared(0, arch) if host is tvm else OPTIN_SHARED_BYTES.get(arch, 0)
    return Target("cuda", {"kind": "cuda", "arch": arch}, dev.device_name, n, _gpu_limits(dev, optin),
                  dev.total_global_memory)


def _rocm(host: Any) -> Target | None:
    n = _count(host.rocm)
    if n == 0:
        return None
    dev = host.rocm(0)
    gcn = dev._GetDeviceAttr(dev.dlpack_device_type(), 0, 10)  # kGcnArch, e.g. 908 -> gfx908
    target = {"kind": "rocm", "mcpu": f"gfx{gcn}"} if gcn else {"kind": "rocm"}
    return Target("rocm", target, dev.device_name or "AMD GPU", n, _gpu_limits(dev), dev.total_global_memory)


def _llvm(host: Any) -> Target:
    import tvm

    if host is tvm:
        cpu, memory = tvm.target.codegen.llvm_get_system_cpu(), psutil.virtual_memory().total
    else:  # the name LLVM gives the server's CPU, so that the build here tunes code for it
        cpu, memory = host.get_function("target.llvm_get_system_cpu")(), host.cpu(0).total_global_memory
    return Target("llvm", {"kind": "llvm", "mcpu": cpu}, f"cpu {cpu}", 1, None, memory)


def resolve(kind: str = "auto", host: Any = None) -> Target:
    """The target for `kind` (one of KINDS); TargetError if that kind has no device here.

    `host`: an RPC session (tvm.rpc) to ask a remote machine instead of this one.
    """
    import tvm

    if kind not in KINDS:
        raise TargetError(f"unknown target {kind!r}: expected one of {', '.join(KINDS)}")
    host = tvm if host is None else host
    if kind == "llvm":
        return _llvm(host)
    probes = {"cuda": [_cuda], "rocm": [_rocm], "auto": [_cuda, _rocm]}[kind]
    for probe in probes:
        found = probe(host)
        if found is not None:
            return found
    if kind == "auto":
        return _llvm(host)
    raise TargetError(f"target {kind!r} requested but no {kind.upper()} device is visible "
                      f"(TVM found none; check the driver and that this TVM build supports {kind})")


def _cache_file(kind: str, runner: str) -> Path:
    """Per runner, target kind, visible-device set and boot: a new driver or GPU means a new boot."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    key = "-".join([runner.replace(":", "_"), kind, os.environ.get("CUDA_VISIBLE_DEVICES", "all"), os.environ.get("HIP_VISIBLE_DEVICES", "all"),
                    boot.read_text().strip() if boot.exists() else "boot"])
    return lock_dir() / f"target-{key.replace('/', '_').replace(',', '_')}.json"


def save(kind: str, target: Target, runner: str = LOCAL) -> None:
    """Remember what `resolve(kind)` found through `runner` (written atomically: trials run concurrently)."""
    path = _cache_file(kind, runner)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(target.describe()))
    tmp.replace(path)


def load(kind: str, runner: str = LOCAL) -> Target | None:
    """What `resolve(kind)` found through `runner` earlier since this machine booted, if anything."""
    try:
        return Target.from_description(json.loads(_cache_file(kind, runner).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
