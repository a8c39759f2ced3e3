"""The Hopper warpgroup-MMA template: chosen for float16 mm (and bmm) on sm_90 only, its knobs checked against the
device, its kernels compiled as a GPU machine compiles them (NVRTC, then ptxas for sm_90a) in every
layout, and every suite tuner proposing only configs of its space that the device runs.  (Its results
are verified on GPUs only: a CPU has no wgmma; the CPU keeps the tensor-core template's plain schedule.)"""
import json
import math
import random
import re

import pytest
from tuner_harness import FakeNNI, make_tuner, no_checkpoint_dir  # noqa: F401

from benchmarks.proposals import stand_in
from experiments import write
from searchspace import ConstrainedSpace, SearchSpace
from trial import build, check, templates
from trial.archs import target_of
from trial.constraints import KernelRules, not_dividing
from trial.templates import tensorcore, wgmma
from trial.workload import parse_name
from tuners.gbfs import GBFSTuner
from tuners.na2c import NA2CTuner
from tuners.opevo import OpEvoTuner

from cuda_kernels import valid_configs
from nvrtc import compile_kernels, cuda_toolkit  # noqa: F401

SM90, SM80 = target_of("sm_90"), target_of("sm_80")
LARGE = "mm/N512K1024M4096_f16"


def test_float16_mm_and_bmm_on_hopper_get_the_wgmma_template_and_configs_name_theirs():
    wl = parse_name(LARGE)
    assert templates.load(wl, target=SM90) is wgmma
    assert templates.load(wl, target=SM80) is tensorcore and templates.load(wl) is tensorcore
    assert templates.load(parse_name("mm/N96K1024M4096_f16"), target=SM90) is tensorcore  # N not in 64s
    assert templates.load(parse_name("bmm/B2N64K64M64_f16"), target=SM90) is wgmma  # tests/test_wgmma_batched.py
    assert templates.load(parse_name("bmm/B2N96K64M64_f16"), target=SM90) is tensorcore
    assert templates.load(parse_name("mm/N512K1024M4096_i8"), target=SM90) is tensorcore
    assert templates.load(wl, params=wgmma.default_params(wl, True)) is wgmma
    assert templates.load(wl, target=SM90, params=tensorcore.default_params(wl, True)) is tensorcore
    assert wgmma not in templates.candidates(parse_name("mm/N512K1024M4096_i8"))


def test_the_device_and_the_tiles_decide_what_is_valid():
    wl = parse_name(LARGE)
    assert not KernelRules(wl, wgmma, SM90).problems(wgmma.default_params(wl, True))
    assert KernelRules(wl, wgmma, SM80).problems(wgmma.default_params(wl, True))[0] == \
        "these instructions exist on CUDA sm_90 only, not on any sm_80 GPU"
    small = parse_name("mm/N192K1024M4096_f16")
    with pytest.raises(check.InvalidConfig, match=r"288768 bytes of shared memory per block > device limit 232448; "
                                                  r"N 192's 3 row tiles of 64 do not pair up in clusters of 2"):
        check.check(small, wgmma, {"rows": 64, "cols": 256, "stages": 7, "in_flight": 0, "producer": 1, "cluster": 2,
                                   "split": 1, "slices": 1, "epilogue": 0}, SM90)
    assert wgmma.default_params(small, True)["rows"] == 64
    check.check(small, wgmma, wgmma.default_params(small, True), SM90)
    with pytest.raises(check.InvalidConfig, match="K 96 is not a multiple of the 64-deep K tile"):
        check.check(parse_name("mm/N128K96M128_f16"), wgmma, wgmma.default_params(small, True), SM90)
    three_tiles = parse_name("mm/N128K192M128_f16")
    with pytest.raises(check.InvalidConfig, match="split 2 does not divide K's 3 tiles of 64"):
        check.check(three_tiles, wgmma, {**wgmma.default_params(three_tiles, True), "split": 2}, SM90)
    with pytest.raises(check.InvalidConfig, match="slices 2 do not divide a CTA's 3 K tiles; K slices take turns at "
                                                  "the stages through mbarriers: slices 2 needs producer 1"):
        check.check(three_tiles, wgmma, {**wgmma.default_params(three_tiles, True), "slices": 2}, SM90)
    with pytest.raises(check.InvalidConfig, match=r"stages 2 <= in_flight 1 x slices 2: .* \(a deadlock\)"):
        check.check(wl, wgmma, {**wgmma.default_params(wl, True), "producer": 1, "stages": 2, "slices": 2}, SM90)
    with pytest.raises(check.InvalidConfig, match="stages 3 are not a multiple of slices 2"):
        check.check(wl, wgmma, {**wgmma.default_params(wl, True), "producer": 1, "stages": 3, "slices": 2, "rows": 64},
                    SM90)
    check.check(wl, wgmma, {**wgmma.default_params(wl, True), "producer": 1, "stages": 4, "slices": 2, "rows": 64}, SM90)
    with pytest.raises(check.InvalidConfig, match=r"shares B \(cluster 2\) or splits K \(split > 1\), not both"):
        check.check(wl, wgmma, {**wgmma.default_params(wl, True), "producer": 1, "cluster": 2, "split": 2}, SM90)
    split = {**wgmma.default_params(wl, True), "rows": 128, "cols": 256, "stages": 2, "split": 2, "epilogue": 0}
    assert wgmma.resources(wl, split)["shared_bytes"] == 2 * 1024 + 128 * 256 * 4  # the partial tile, over the stages
    staged = {**split, "epilogue": 1}  # and the half of the output tile it stores, after it
    assert wgmma.resources(wl, staged)["shared_bytes"] == 2 * 1024 + 128 * 256 * 4 + 128 * (128 + 8) * 2
    check.check(wl, wgmma, split, SM90)
    sliced = {**staged, "split": 1, "slices": 2, "producer": 1}  # slice 1's float32 tile, then the output tile
    assert wgmma.resources(wl, sliced)["threads"] == 5 * 128
    assert wgmma.resources(wl, sliced)["shared_bytes"] == 2 * 1024 + 128 * 256 * 4 + 128 * (256 + 8) * 2
    assert wgmma.resources(wl, {**sliced, "split": 2})["shared_bytes"] == 2 * 1024 + 128 * 256 * 4 + 128 * 136 * 2


def test_a_tile_count_that_does_not_divide_is_graded_by_the_halvings_it_needs():
    # 0 exactly where the part divides; else log2(part / gcd), so a repair descends 8 -> 4 -> 2 -> 1 on K's 3 tiles
    # (each move closer), where a 1-or-0 rule gives no step an edge until the last.
    assert [not_dividing(part, 12) for part in (1, 2, 4, 8, 3, 6, 5)] == [0, 0, 0, 1, 0, 0, math.log2(5)]
    assert not_dividing(4, 0) == 0  # 0 % 4 == 0: no K tile left to a CTA is another rule's to refuse
    three_tiles = parse_name("mm/N128K192M128_f16")
    kernel = KernelRules(three_tiles, wgmma, SM90)
    split = [kernel.excess({**wgmma.default_params(three_tiles, True), "split": s}) for s in (8, 4, 2, 1)]
    assert split == sorted(split, reverse=True) and split[-1] == 0 < split[-2] < split[0]
    space = ConstrainedSpace.of(SearchSpace.from_json(wgmma.search_space(three_tiles)), kernel)
    repaired = space.repair({**wgmma.default_params(three_tiles, True), "split": 8}, random.Random(0))
    assert repaired["split"] == 1 and kernel.excess(repaired) == 0


@pytest.mark.parametrize("layout,transposes", [("NN", "0_1"), ("NT", "0_0"), ("TN", "1_1"), ("TT", "1_0")])
def test_every_layout_compiles_for_sm_90a_with_its_operands_transposes(cuda_toolkit, layout, transposes):
    """A (N, K) and B (K, M) in shared memory as TMA writes them: K-major operands (A of N*, B of *T) with the
    transpose bit 0, MN-major ones with 1; the kernel keeps everything in registers and shared memory, and
    compiles without local memory."""
    wl = parse_name(f"mm/N512K1024M1024P{layout}_f16")
    for config in valid_configs(wl, SM90, 2, seed=4, template=wgmma):
        source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
        assert set(re.findall(r"wgmma_f16_ss_mma_async_sync_aligned_m64n(\d+)k16_f32_f16_f16_1_1_(\d_\d)", source)) == \
            {(str(config["cols"]), transposes)}, config
        assert re.findall(r"cp_async_bulk_tensor", source), config
        assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90a")), config


def test_bfloat16_mm_on_hopper_is_the_float16_kernel_on_bfloat16(cuda_toolkit):
    """bfloat16 gets the wgmma template too: per config, float16's kernel with wgmma's operand type and the
    element type renamed, compiled for sm_90a without local memory."""
    bf16, f16 = parse_name("mm/N512K1024M1024PTN_bf16"), parse_name("mm/N512K1024M1024PTN_f16")
    assert templates.load(bf16, target=SM90) is wgmma and templates.load(bf16, target=SM80) is tensorcore
    for config in valid_configs(f16, SM90, 2, seed=5, template=wgmma):
        source = build.build(bf16, wgmma, config, SM90).mod.imports[0].inspect_source()
        kernel = source[source.index('extern "C"'):]
        assert f"m64n{config['cols']}k16_f32_bf16_bf16" in kernel, config
        f16_source = build.build(f16, wgmma, config, SM90).mod.imports[0].inspect_source()
        assert kernel.replace("nv_bfloat16", "half").replace("bf16", "f16") == f16_source[f16_source.index('extern "C"'):]
        assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90a")), config


def descriptor(start_units: int, lbo: int, sbo: int) -> int:
    """A wgmma matrix descriptor with the 128-byte swizzle, as the PTX ISA lays its fields out: start address
    (16-byte units) bits 0-13, leading byte offset 16-29, stride byte offset 32-45, layout type 62-63 (1)."""
    return start_units & 0x3FFF | lbo << 16 | sbo << 32 | 1 << 62


@pytest.mark.parametrize("layout", ["NN", "TT"])
def test_each_wgmma_reads_its_k_step_through_descriptors_added_up_from_the_tiles_start(layout):
    """A K tile's start address is taken once, and each of its four wgmmas' descriptors is that start moved on
    by the wgmma's K step (K-major: 32 bytes, LBO 1, SBO 64; MN-major: a 2 KiB box row, LBO 512, SBO 64) over
    the fields every descriptor of the operand shares; no descriptor is encoded field by field in the loop."""
    wl = parse_name(f"mm/N512K1024M1024P{layout}_f16")
    config = {**wgmma.default_params(wl, True), "rows": 64, "cols": 64, "producer": 1, "slices": 2}
    check.check(wl, wgmma, config, SM90)
    kernel = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source().split("__global__")[-1]
    assert "encode_matrix_descriptor(" not in kernel
    k_major = {"a": layout[0] == "N", "b": layout[1] == "T"}
    for first, operand in ((0, "a"), (4, "b")):  # descs[j]: A's j-th descriptor, descs[4 + j]: B's
        found = re.findall(rf"descs_ptr\[(\d)\] = \(\(uint64_t\)(\d+)ULL \| \(\(uint64_t\)\(?"
                           rf"{operand}_start_ptr\[0\](?: \+ \(uint\)(\d+)\))?\)", kernel)
        lbo, step = (1, 2) if k_major[operand] else (512, 128)
        assert [(int(at), int(high), int(units or 0)) for at, high, units in found] == \
            [(first + j, descriptor(0, lbo, 64), j * step) for j in range(4)], operand


@pytest.mark.parametrize("split,cluster", [(2, 1), (1, 2)])
def test_a_clusters_descriptors_take_their_start_from_the_ctas_own_shared_address(split, cluster):
    """In a cluster the shared address of the CTA of rank 1 is 0x01000400 where rank 0's is 0x400 (`cvta.to.shared`
    on an H200): each K tile's start is cut to the descriptor's 14-bit field, so that the rank's bits do not land in
    LBO, which the 128-column MN-major B (two 64-wide boxes, LBO 512) reads."""
    from trial.templates.wgmma_operand import Operand

    assert Operand.start_units(0x01000400) == Operand.start_units(0x400) == 0x400 // 16
    wl = parse_name("mm/N512K4096M1024_f16")
    config = {**wgmma.default_params(wl, True), "rows": 64, "cols": 128, "stages": 8, "producer": 1,
              "split": split, "cluster": cluster}
    check.check(wl, wgmma, config, SM90)
    kernel = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source().split("__global__")[-1]
    for operand in "ab":
        starts = re.findall(rf"{operand}_start_ptr\[0\] = \(\(tvm_builtin_cuda_cvta_generic_to_shared\(.*\) >> "
                            rf"\(uint\)4\) & \(uint\)(\d+)\);", kernel)
        assert starts == [str((1 << 14) - 1)], operand


@pytest.mark.parametrize("rows,cols,stages", [(64, 64, 14), (128, 128, 7)])
def test_the_deepest_pipelines_the_shared_memory_holds_compile(cuda_toolkit, rows, cols, stages):
    """Deeper than cuBLAS's float16 kernels go (13 stages of 64 x 64 tiles, 6 of 128 x 128): as deep as the
    opt-in shared memory holds, each stage with its own full and empty mbarrier."""
    wl = parse_name(LARGE)
    config = {**wgmma.default_params(wl, True), "rows": rows, "cols": cols, "stages": stages, "producer": 1}
    check.check(wl, wgmma, config, SM90)
    assert wgmma.resources(wl, {**config, "stages": stages + 1})["shared_bytes"] > SM90.limits.shared_memory_per_block
    source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
    barriers = re.findall(r"mbarrier_init_init_shared_b64\(.*\(uint64_t\*\)pool_buf_ptr\)\[(\d+)\]", source)
    assert sorted(map(int, barriers)) == list(range(2 * stages)), barriers
    assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90a")), config


@pytest.mark.parametrize("rows,cols,cluster,split", [(64, 64, 1, 1), (128, 256, 2, 1), (128, 64, 1, 2), (64, 64, 1, 8)])
def test_the_staged_epilogue_writes_whole_rows_in_16_byte_segments(cuda_toolkit, rows, cols, cluster, split):
    """`epilogue` 1: the tile (a split CTA: the columns it sums) goes through shared memory, and the threads
    write C in 16-byte segments, no 4-byte pairs; without it, each thread stores its own pairs."""
    wl = parse_name("mm/N512K1024M1024PTT_f16")
    config = {**wgmma.default_params(wl, True), "rows": rows, "cols": cols, "stages": 2, "producer": 1,
              "cluster": cluster, "split": split, "epilogue": 1}
    check.check(wl, wgmma, config, SM90)
    source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
    segments, threads = rows * cols // split // 8, rows // 64 * 128
    assert len(re.findall(r"\*\(uint4\*\)\(C_ptr \+", source)) == -(-segments // threads)
    assert not re.findall(r"\*\(half2\*\)\(C_ptr \+", source)
    direct = build.build(wl, wgmma, {**config, "epilogue": 0}, SM90).mod.imports[0].inspect_source()
    assert len(re.findall(r"\*\(half2\*\)\(C_ptr \+", direct)) == cols // 4 // split  # two pairs a group
    assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90a"))


@pytest.mark.parametrize("n,guarded", [(2048, 4), (2112, 0)])
def test_a_row_tile_past_n_stores_only_ns_rows(cuda_toolkit, n, guarded):
    """192-row tiles (three consumer warpgroups) of N 2,048: 11 row tiles, the last reaching 64 rows past N; TMA
    reads those rows of A as zeros, and its segments of them (4 of each thread's 12) are not stored.  Where the
    tiles cover N, nothing is guarded."""
    wl = parse_name(f"mm/N{n}K768M2304PNT_f16")
    config = {**wgmma.default_params(wl, True), "rows": 192, "cols": 192, "producer": 1}
    check.check(wl, wgmma, config, SM90)
    assert wgmma.rows_of_tiles(wl, 192) == 11
    source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
    assert "__launch_bounds__(512)" in source
    assert len(re.findall(r"\*\(uint4\*\)\(C_ptr \+", source)) == 192 * 192 // 8 // 384
    assert source.count("if (((int)blockIdx.y) < 10) {") == guarded
    assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90a"))


@pytest.mark.parametrize("split,cols", [(2, 64), (4, 128), (8, 256)])
def test_split_ctas_add_their_partial_tiles_through_distributed_shared_memory(cuda_toolkit, split, cols):
    """Each of a cluster's `split` CTAs multiplies its share of K, then sums its share of the tile's 8-column
    groups from every CTA's shared memory (one 16-byte `ld.shared::cluster` per CTA and group) and stores it;
    each pair of sums C receives is loaded once, after it was summed (TVM's CUDA codegen reuses a vector
    load of the same text within a scope: reading the sums of every group from one place stored the first
    group's sums everywhere, seen on an H100); no local memory."""
    wl = parse_name("mm/N512K4096M1024PTN_f16")
    config = {**wgmma.default_params(wl, True), "cols": cols, "producer": 1, "split": split, "epilogue": 0}
    check.check(wl, wgmma, config, SM90)
    source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
    kernel = source[source.index("__global__ void __launch_bounds__"):]
    groups = cols // 8
    assert kernel.count("tvm_builtin_ptx_ld_vec_shared__cluster_v4_f32(") == groups  # groups / split, split CTAs
    assert re.findall(r"for \(int t = 0; t < (\d+);", kernel)[0] == str(4096 // 64 // split)  # the copies' loop
    loads = re.findall(r"float2 \w+ = \*\(float2\*\)\(acc_ptr \+ (\d+)\);", kernel)
    stores = kernel.count("*(half2*)(C_ptr + ")
    assert stores == 2 * groups // split and sorted(map(int, loads)) == list(range(0, 2 * stores, 2))
    assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90a"))


@pytest.mark.parametrize("rows,cols,split,epilogue", [(64, 64, 1, 1), (64, 256, 1, 0), (128, 64, 2, 1)])
def test_k_slices_take_alternate_tiles_and_hand_their_sums_to_slice_0(cuda_toolkit, rows, cols, split, epilogue):
    """`slices` 2: twice the consumer warpgroups, each running half of the CTA's K tiles with accumulators of
    its own; slice 1 writes its sums to shared memory in 16-byte stores, and only slice 0 stores C; within
    the register estimate, no local memory."""
    wl = parse_name("mm/N512K4096M1024PTN_f16")
    config = {**wgmma.default_params(wl, True), "rows": rows, "cols": cols, "stages": 4, "producer": 1,
              "split": split, "slices": 2, "epilogue": epilogue}
    check.check(wl, wgmma, config, SM90)
    threads = wgmma.resources(wl, config)["threads"]
    assert threads == (rows // 64 * 2 + 1) * 128
    source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
    kernel = source[source.index(f"__global__ void __launch_bounds__({threads})"):]
    assert re.findall(r"for \(int i = 0; i < (\d+);", kernel)[0] == str(4096 // 64 // split // 2)
    assert len(re.findall(r"\*\(float4\*\)\(\(\(float\*\)pool_buf_ptr\) \+ .*\) = \*\(float4\*\)\(acc_ptr", kernel)) == \
        cols // 8 * (2 if split > 1 else 1)  # slice 1's sums, then a split CTA's partial tile
    assert f"if (((int)threadIdx.x) < {rows * 2})" in kernel  # slice 0 alone sums and stores
    assert all(k.stack_bytes == 0 and k.spill_bytes == 0 for k in compile_kernels(source, "sm_90a"))


@pytest.mark.parametrize("cls", [OpEvoTuner, GBFSTuner, NA2CTuner], ids=lambda c: c.__name__)
def test_every_proposal_is_a_wgmma_kernel_the_device_runs(cls):
    """2174 of the space's 19968 configs are valid for mm/N512K1024M4096_f16 on sm_90 (192-wide tiles do not
    divide M, 192-row ones leave N's 3 row tiles unpaired, cluster 2 needs producer 1 and no split, K slices
    need producer 1 and a multiple of their number of stages, more than they hold, deep stages exceed the
    shared memory: 14 fit of 64 x 64 tiles, 7 of 128 x 128, 4 of 128 x 256): the tuners propose only those."""
    wl = parse_name(LARGE)
    space = SearchSpace.from_json(wgmma.search_space(wl))
    rules = KernelRules(wl, wgmma, SM90)
    valid = [c for c in space.values() if not rules.problems(c)]
    assert len(valid) == 2174
    deepest = {(c["rows"], c["cols"]): max(v["stages"] for v in valid if (v["rows"], v["cols"]) == (c["rows"], c["cols"]))
               for c in valid}
    assert deepest == {(64, 64): 14, (64, 128): 9, (64, 256): 5, (128, 64): 9, (128, 128): 7, (128, 256): 4,
                       (192, 64): 7, (192, 128): 5, (192, 256): 4}
    evaluate = stand_in(wl, wgmma, SM90)
    tuner = make_tuner(cls, wgmma.search_space(wl), workload=LARGE, target="sm_90", seed=1)
    run = FakeNNI(tuner, lambda config: evaluate(config).report(), concurrency=4).run(40)
    assert len(run.proposed) == 40 and all(outcome is not None for outcome in run.outcomes)


def test_an_experiment_for_hopper_searches_the_wgmma_knobs(tmp_path):
    """Written for sm_90 (or on an H100), the experiment's space is the wgmma template's; written for
    whichever GPU runs it (`--arch auto`), the portable tensor-core template's."""
    wl = parse_name(LARGE)
    hopper = write.write(wl, tmp_path / "h", arch="sm_90")
    assert list(json.loads((hopper / "search_space.json").read_text())) == list(wgmma.search_space(wl))
    anywhere = write.write(wl, tmp_path / "a", arch="auto")
    assert list(json.loads((anywhere / "search_space.json").read_text())) == list(tensorcore.search_space(wl))
