"""Tensor-core matmul and bmm (float16, int8, float8 e4m3): verified on the CPU in each type, and lowered
to CUDA MMA code for GPUs this machine need not have, with every tuner proposing only runnable kernels."""
import random
import re
from pathlib import Path

import pytest
import tvm.s_tir.tensor_intrin.cuda  # noqa: F401  (registers the WMMA intrinsics MetaSchedule's trace uses)
from tvm import s_tir
from tuner_harness import no_checkpoint_dir, refused_proposals  # noqa: F401

from searchspace import SearchSpace
from trial import build, check, templates
from trial.archs import target_of
from trial.constraints import KernelRules
from trial.measure import Options, measure
from trial.templates import tensorcore
from trial.templates.common import SUM_THREADS
from trial.workload import parse, parse_name
from tuners.gbfs import GBFSTuner
from tuners.na2c import NA2CTuner
from tuners.opevo import OpEvoTuner

from cuda_kernels import (device_module, dynamic_shared_bytes, loads_reused_across_barriers, static_shared_bytes,
                          valid_configs)

FAST = Options(target="llvm", min_repeat_ms=1)
SM90, SM80 = target_of("sm_90"), target_of("sm_80")
SMALL = [("mm", f"N32K64M48P{lay}_f16") for lay in ("NN", "NT", "TN", "TT")] + \
        [("bmm", "B3N16K32M32PTN_f16"), ("mm", "N32K64M48_bf16"), ("mm", "N32K64M48PTT_bf16"),
         ("bmm", "B3N16K32M32PNT_bf16"), ("mm", "N32K64M16_i8"), ("mm", "N16K96M32PNT_i8"),
         ("mm", "N48K64M16_e4m3"), ("bmm", "B2N16K64M32PNT_e4m3")]
GPU = ["mm/N512K1024M1024_f16", "mm/N512K4096M1024PTT_f16", "bmm/B960N128K64M128PNT_f16",
       "mm/N512K1024M1024PTN_bf16", "bmm/B960N128K64M128PNT_bf16",
       "mm/N512K1024M1024_i8", "mm/N512K1024M1024PNT_i8", "mm/N512K1024M1024PNT_e4m3"]


def test_narrow_types_get_the_tensor_core_template():
    assert templates.load(parse("mm", "N32K32M32_f16")) is tensorcore
    assert templates.load(parse("bmm", "B2N32K32M32_e4m3")) is tensorcore
    assert templates.load(parse("mm", "N32K32M32")) is not tensorcore


@pytest.mark.parametrize("op,spec", SMALL)
def test_every_type_and_layout_verifies_on_the_cpu(op, spec):
    """The hand-picked config and a random one compute the right answer in the workload's type, checked
    against the float64 reference within the type's tolerance (exactly for int8)."""
    wl = parse(op, spec)
    space = SearchSpace.from_json(tensorcore.search_space(wl))
    for params in (None, space.sample(random.Random(1))):
        r = measure(wl, params, FAST)
        assert r.status == "ok", (params, r.reason)
        assert r.gflops > 0


def fragment_arrays(source):
    """{operand: elements} of each per-thread fragment array (A_shared_warp, its pipeline copies, C_warp)."""
    return {name[0]: int(size) for name, size in re.findall(r"(\w+_warp\w*)\[(\d+)\];", source)}


def fragments_per_thread(wl, params):
    """What one thread holds: its share (1/32) of the warp's 16 x mma_k A and B fragments and 16x16 accumulators."""
    (_, x2), (_, y2), k2 = params["X"][1:], params["Y"][1:], params["K"][3]
    share = 16 * wl.element.mma_k // 32
    return {"A": x2 * k2 * share, "B": y2 * k2 * share, "C": 8 * x2 * y2}


def assert_shared_bytes_declared(lowered, estimate, params):
    """The estimate is what the kernel allocates: exactly, where the input tiles are static and only the
    accumulator tile is dynamic; else at most, and at least half (TVM may overlap dynamic allocations
    that are not live together, so a kernel may need only the larger of the two parts)."""
    static, dynamic = static_shared_bytes(lowered), dynamic_shared_bytes(lowered)
    if static:
        assert static + dynamic == estimate, params
    else:
        assert estimate / 2 <= dynamic <= estimate, params


@pytest.mark.parametrize("name", GPU)
def test_tensor_core_kernels_lower_to_mma_with_the_estimated_shared_memory(name):
    """The default and random valid configs tensorize and lower to CUDA for sm_90: ldmatrix into
    fragments, mma.sync of the type's shape, cp.async where `pipeline` >= 2, fragments in per-thread
    arrays of the thread's share (registers, not a whole warp's tiles in local memory), no shared value
    reused across a barrier, stores of C in vectors of four (16-bit types: rounded from the float32 sums), and the shared memory (padded rows, pipeline buffers, the accumulator tile) that
    `resources` declares."""
    wl = parse_name(name)
    shape = f"m16n8k{wl.element.mma_k}"
    for params in valid_configs(wl, SM90, 3):
        mod = tensorcore.schedule(wl, params, SM90)
        source = build.build(wl, tensorcore, params, SM90).mod.imports[0].inspect_source()
        assert f"mma.sync.aligned.{shape}" in source and "ldmatrix" in source, params
        assert ("cp.async" in source) == (params["pipeline"] >= 2), params
        assert fragment_arrays(source) == fragments_per_thread(wl, params), params
        assert not loads_reused_across_barriers(source), params
        assert re.search(r"\*\((float|int|half|nv_bfloat16)4\*\)\((C|rounded)_ptr|(float|int)4\* __restrict__ C_rf_ptr", source), params
        lowered = device_module(mod, SM90)
        assert_shared_bytes_declared(lowered, tensorcore.resources(wl, params)["shared_bytes"], params)


@pytest.mark.parametrize("name", ["mm/N64K256M32PTN_f16", "bmm/B2N16K128M32_f16", "mm/N32K256M16PNT_i8",
                                  "mm/N16K512M32_e4m3"])
def test_split_k_partials_add_up_to_the_product(name):
    """Split-K on the CPU: each of four K slices sums into its own partial, a second stage adds the partials
    and rounds (float16): verified against the float64 reference like any other config."""
    wl = parse_name(name)
    slices = [4, 1, 1, wl.dims["K"] // wl.element.mma_k // 4]
    r = measure(wl, {**tensorcore.default_params(wl, False), "K": slices}, FAST)
    assert r.status == "ok", r.reason


@pytest.mark.parametrize("name", ["mm/N512K4096M1024_f16", "bmm/B960N128K128M64PTN_f16", "mm/N512K4096M1024PNT_i8"])
def test_split_k_is_a_tensor_core_kernel_and_a_kernel_that_sums_the_partials(name):
    """On sm_90, K[0] thread blocks per output tile write partials in the accumulation type, and a second
    kernel of SUM_THREADS threads adds them up and writes C in vectors; both kernels access the partials
    in 16-byte vectors only."""
    wl = parse_name(name)
    params = {**tensorcore.default_params(wl, True), "K": [4, wl.dims["K"] // wl.element.mma_k // 8, 1, 2]}
    source = build.build(wl, tensorcore, params, SM90).mod.imports[0].inspect_source()
    kernels = dict.fromkeys(re.findall(r"__global__ void __launch_bounds__\((\d+)\) (\w+)\(", source))  # declared, defined
    assert [threads for threads, _ in kernels] == [str(32 * 2 * 2), str(SUM_THREADS)], kernels
    acc = {"float32": "float", "int32": "int"}[wl.element.acc]
    assert re.search(rf"{acc}4\* __restrict__ C_rf_ptr", source) and "mma.sync" in source  # only vectors of it
    summed = "rounded" if wl.element.rounds_output else "C"
    assert re.search(rf"\*\(\w+4\*\)\({summed}_ptr|\w+4\* __restrict__ {summed}_ptr", source)  # in vectors too


def test_batches_and_k_slices_fit_in_the_grids_z_extent():
    """blockIdx.z carries batches times K slices: a split that takes it past CUDA's 65535 is invalid, with the
    reason, and the constrained space proposes none."""
    wl = parse_name("bmm/B40000N16K64M16_f16")
    rules = KernelRules(wl, tensorcore, SM90)
    one = {**tensorcore.default_params(wl, True), "K": [1, 4, 1, 1]}
    assert not rules.problems(one)
    assert rules.problems({**one, "K": [2, 2, 1, 1]}) == [
        "40000 batches x 2 K slices = 80000 thread blocks along blockIdx.z > 65535"]
    assert all(c["K"][0] == 1 for c in valid_configs(wl, SM90, 50)[1:])


@pytest.mark.parametrize("name", ["mm/N512K1024M1024_f16", "mm/N512K1024M1024PNT_i8"])
def test_blocks_beyond_48k_keep_their_tiles_in_dynamic_shared_memory(name):
    wl = parse_name(name)
    params = {"K": [1, wl.dims["K"] // wl.element.mma_k // 4, 2, 2], "X": [4, 2, 4], "Y": [8, 2, 4], "pad": 1,
              "unroll": 0, "pipeline": 4}
    estimate = tensorcore.resources(wl, params)["shared_bytes"]
    assert estimate > 48 * 1024
    check.check(wl, tensorcore, params, SM90)
    lowered = device_module(tensorcore.schedule(wl, params, SM90), SM90)
    assert static_shared_bytes(lowered) == 0 and dynamic_shared_bytes(lowered) > 48 * 1024
    assert_shared_bytes_declared(lowered, estimate, params)


def test_the_devices_tensor_cores_decide_what_is_valid():
    f16, e4m3 = parse_name("mm/N512K1024M1024_f16"), parse_name("mm/N512K1024M1024PNT_e4m3")
    assert not KernelRules(f16, tensorcore, SM80).problems(tensorcore.default_params(f16, True))
    assert any("need CUDA sm_89" in p for p in KernelRules(e4m3, tensorcore, SM80).problems(
        tensorcore.default_params(e4m3, True)))
    sm75 = KernelRules(f16, tensorcore, target_of("sm_75")).problems({**tensorcore.default_params(f16, True),
                                                                       "pipeline": 1})
    assert sm75 == ["these tensor-core instructions need CUDA sm_80 or newer, not any sm_75 GPU"]
    uneven = {**tensorcore.default_params(f16, True), "X": [8, 4, 1], "Y": [64, 1, 1], "K": [1, 64, 1, 1]}
    assert any("B's 16x16 shared tile is not a whole number of 128 threads x 8 elements" in p
               for p in KernelRules(f16, tensorcore, SM90).problems(uneven))


@pytest.mark.parametrize("name", ["mm/N512K1024M1024_f16", "bmm/B960N128K64M128PNT_bf16", "mm/N512K4096M1024PNT_i8"])
@pytest.mark.parametrize("cls", [OpEvoTuner, GBFSTuner, NA2CTuner], ids=lambda c: c.__name__)
def test_every_proposal_is_a_tensor_core_kernel_the_device_runs(cls, name):
    failed = refused_proposals(cls, name, tensorcore, "sm_90", 500)
    assert failed <= 5, f"{failed} of 500 proposals broke the device's rules"


def test_the_barrier_check_finds_the_stale_reads_of_metaschedules_bmm_kernel():
    """MetaSchedule's best bmm PNN float16 schedule of an H100 run (its trace, tests/data) lowers to CUDA
    that writes its first round of staged accumulators twice: the check that the template's kernels pass
    above finds exactly those reused values."""
    wl = parse_name("bmm/B960N128K128M64PNN_f16")
    trace = (Path(__file__).parent / "data" / "metaschedule_bmm_B960N128K128M64PNN_f16.trace").read_text()
    scope = {"s_tir": s_tir}
    exec(trace, scope)
    sch = s_tir.Schedule(tensorcore.prim_func(wl))
    scope["apply_trace"](sch)
    source = build.compile_module(sch.mod, SM90.target).mod.imports[0].inspect_source()
    assert loads_reused_across_barriers(source) == ["v_", "v__1", "v__2", "v__3"]


def kernel_source(wl, template, params, renamed=False):
    """The CUDA kernel (without the shared helpers above it); `renamed`: bfloat16's names read as float16's."""
    source = build.build(wl, template, params, SM90).mod.imports[0].inspect_source()
    kernel = source[source.index('extern "C"'):]
    return kernel.replace("nv_bfloat16", "half").replace("bf16", "f16") if renamed else kernel


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_bfloat16_kernels_are_the_float16_kernels_of_the_same_config(layout):
    """bfloat16 runs float16's instructions (ldmatrix of 16-bit elements, mma.sync m16n8k16 into float32) on
    another element type: for each config, the CUDA kernel is float16's with the type's names replaced, so
    ldmatrix keeps its 16-bit loads (not TVM's element-by-element fallback for 8-bit types)."""
    bf16, f16 = parse_name(f"bmm/B4N64K128M64P{layout}_bf16"), parse_name(f"bmm/B4N64K128M64P{layout}_f16")
    for params in valid_configs(f16, SM90, 3, seed=7):
        source = kernel_source(bf16, tensorcore, params)
        assert ".bf16.bf16" in source and "ldmatrix" in source, params
        assert kernel_source(bf16, tensorcore, params, renamed=True) == kernel_source(f16, tensorcore, params), params
