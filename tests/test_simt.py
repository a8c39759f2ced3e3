"""The Hopper float32 template (TIRx, CUDA cores): chosen for float32 mm on sm_90 only, its knobs checked against
the device, its kernels compiled as a GPU machine compiles them (NVRTC, then ptxas) in all four layouts, a K-major
B read where the TMA's swizzle puts it, and every suite tuner proposing only configs of its space that the device
runs.  (Its results are verified on GPUs only: TMA, mbarriers and clusters have no CPU form; the CPU keeps the
portable template.)"""
import json
import re

import pytest
from tuner_harness import FakeNNI, make_tuner, no_checkpoint_dir  # noqa: F401

from benchmarks.proposals import stand_in
from experiments import write
from searchspace import SearchSpace
from trial import build, check, templates
from trial.archs import target_of
from trial.constraints import KernelRules
from trial.templates import matmul, simt, simt_operand
from trial.workload import parse_name
from tuners.gbfs import GBFSTuner
from tuners.na2c import NA2CTuner
from tuners.opevo import OpEvoTuner

from cuda_kernels import valid_configs
from nvrtc import compile_kernels, cuda_toolkit, ptx  # noqa: F401

SM90, SM80 = target_of("sm_90"), target_of("sm_80")
LONG_K = "mm/N512K4096M1024"


def source_of(wl, config):
    return build.build(wl, simt, config, SM90).mod.imports[0].inspect_source()


def instructions(source):
    """How many times each PTX instruction occurs in what NVRTC makes of `source` for sm_90: the kernel as the
    GPU runs it, its `#pragma unroll` loops unrolled by NVVM."""
    names = re.findall(r"^\s*(?:@%p\d+\s+)?([a-z][\w.:]*)", ptx(source, "sm_90"), re.MULTILINE)
    return {name: names.count(name) for name in set(names)}


def test_float32_mm_and_bmm_on_hopper_get_the_simt_template_in_every_layout():
    wl = parse_name(LONG_K)
    for layout in ("NN", "TN", "NT", "TT"):
        assert templates.load(parse_name(f"mm/N256K512M512P{layout}"), target=SM90) is simt, layout
        assert templates.load(parse_name(f"bmm/B960N128K128M64P{layout}"), target=SM90) is simt, layout
    assert templates.load(wl, target=SM80) is matmul and templates.load(wl) is matmul
    for other in ("mm/N96K4096M1024", "mm/N512K4096M96", "mm/N512K36M1024", "bmm/B960N96K128M64PNN",
                  "bmm/B40000N128K64M64", "mm/N512K4096M1024_f16", "conv/N32C64HW56F64K3ST1PD1"):
        assert templates.load(parse_name(other), target=SM90) is not simt, other
    assert templates.load(wl, target=SM90, params=matmul.default_params(wl, True)) is matmul
    assert templates.load(wl, params=simt.default_params(wl, True)) is simt


def test_the_tiles_and_the_device_decide_what_is_valid():
    wl = parse_name(LONG_K)
    base = simt.default_params(wl, True)
    for name in ("mm/N512K4096M1024", "mm/N512K1024M4096", "mm/N64K24M128", "mm/N256K512M512PTN"):
        check.check(parse_name(name), simt, simt.default_params(parse_name(name), True), SM90)
    with pytest.raises(check.InvalidConfig, match="the tile's 128 rows do not divide N 64"):
        check.check(parse_name("mm/N64K4096M1024"), simt, base, SM90)
    with pytest.raises(check.InvalidConfig, match="a 128 x 512 tile is more than a TMA box of 256 rows"):
        check.check(wl, simt, {**base, "warps_c": 8}, SM90)
    with pytest.raises(check.InvalidConfig, match="split 8 x slices 2 x bk 32 does not divide K 256"):
        check.check(parse_name("mm/N512K256M1024"), simt, {**base, "split": 8}, SM90)
    with pytest.raises(check.InvalidConfig, match="stages 6 are not a multiple of slices 4"):
        check.check(wl, simt, {**base, "slices": 4, "split": 1}, SM90)
    with pytest.raises(check.InvalidConfig, match="slices 2 needs producer 1"):
        check.check(wl, simt, {**base, "producer": 0}, SM90)
    with pytest.raises(check.InvalidConfig, match="split 8 does not divide a thread's 4 quads of sums"):
        check.check(wl, simt, {**base, "tm": 4, "tn": 4, "split": 8}, SM90)
    # 128 sums a thread fit the registers of 8 consumer warps alone, not with a producer warp's 32 threads more
    big = {**base, "warps_r": 8, "warps_c": 1, "tm": 8, "tn": 16, "bk": 8, "stages": 4, "split": 8, "slices": 1}
    check.check(wl, simt, {**big, "producer": 0}, SM90)
    with pytest.raises(check.InvalidConfig, match=r"registers x 288 threads > 65536 registers per block"):
        check.check(wl, simt, {**big, "producer": 1}, SM90)
    with pytest.raises(check.InvalidConfig, match="these instructions exist on CUDA sm_90 only"):
        check.check(wl, simt, base, SM80)
    # a K-major B keeps four K steps of each of a thread's columns: 3 x tn registers more
    wide = {**big, "warps_r": 4, "tn": 16, "split": 2, "producer": 1}
    check.check(wl, simt, wide, SM90)
    with pytest.raises(check.InvalidConfig, match=r"about 284 registers per thread > device limit 255"):
        check.check(parse_name(LONG_K + "PNT"), simt, wide, SM90)


def cute_swizzle(offset, bits):
    """CUDA's TMA swizzle of a shared byte offset (CUTLASS's Swizzle<bits, 4, 3>): the 16-byte chunk's index
    within its 128-byte line XORed with the line's index, in `bits` bits."""
    return offset ^ ((offset >> 3) & (((1 << bits) - 1) << 4))


@pytest.mark.parametrize("bk", [8, 16, 32])
def test_k_major_b_is_read_where_the_tma_swizzle_put_it_and_free_of_bank_conflicts(bk):
    """`b_at` agrees with CUDA's 32-, 64- and 128-byte swizzle (the tensor map's, `swizzle`) for every chunk of
    every row; the eight adjacent columns a quarter warp reads at one K chunk lie in eight distinct 16-byte bank
    groups, all 32 banks."""
    bits = {8: 1, 16: 2, 32: 3}[bk]
    assert simt_operand.swizzle(bk) == bits and simt_operand.tensor_map(True, 64, 1024, 512, bk, True)[8] == bits
    for c in range(64):
        for chunk in range(bk // 4):
            assert simt_operand.b_at(c, chunk, bk) * 4 == cute_swizzle(c * bk * 4 + chunk * 16, bits), (c, chunk)
    for first in range(0, 64, 8):
        for chunk in range(bk // 4):
            banks = {simt_operand.b_at(first + lane, chunk, bk) * 4 // 16 % 8 for lane in range(8)}
            assert banks == set(range(8)), (first, chunk)


@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT"])
def test_kernels_read_shared_memory_in_16_byte_loads_and_keep_no_local_memory(cuda_toolkit, layout):
    """In the PTX, per K tile (the K loop stays a loop) a thread loads A's fragments in tm x bk / 4 and B's in
    tn / 4 x bk 16-byte shared loads (K-major A: one a row for four K steps; M-major A: four rows a K step; B
    likewise, a column for four K steps or four columns a K step), none of them gathered element by element, and
    makes tm x tn x bk FMAs; slice 0 reads the other slices' sums in 16-byte loads too; the kernel compiles without a
    stack frame or spills (the register estimate is an upper bound)."""
    wl = parse_name(f"mm/N512K1024M1024P{layout}")
    for config in valid_configs(wl, SM90, 4, seed=3, template=simt):
        source = source_of(wl, config)
        counts = instructions(source)
        fragments = config["tm"] * config["bk"] // 4 + config["tn"] // 4 * config["bk"]
        handed = (config["slices"] - 1) * config["tm"] * config["tn"] // 4  # slice 0 reads the other slices' sums
        assert counts.get("ld.shared.v4.f32", 0) == fragments + handed, (config, counts)
        assert counts.get("ld.shared.f32", 0) == 0 and "make_float4(" not in source, config
        assert counts["fma.rn.ftz.f32"] == config["tm"] * config["tn"] * config["bk"], config
        reports = compile_kernels(source, "sm_90")
        assert all(k.stack_bytes == 0 and k.spill_bytes == 0 for k in reports), (config, reports)
        assert all(k.registers <= simt.resources(wl, config)["registers_per_thread"] or k.registers == 255
                   for k in reports), (config, reports)


def test_a_bmm_grid_holds_a_row_for_each_row_tile_of_each_product():
    """A grid without clusters gives its rows (gridDim.y, at most 65535) to every product's row tiles: 40,000
    products of 128 rows take the portable template (the default 64-row tiles need 80,000), and taller tiles or a
    split, whose cluster grid is flat, are what fit."""
    wl = parse_name("bmm/B40000N128K64M64")
    short = {**simt.default_params(wl, True), "warps_r": 2}
    assert simt.grid_rows(wl, short) == 160000 and simt.grid_rows(wl, simt.default_params(wl, True)) == 80000
    with pytest.raises(check.InvalidConfig, match="160000 row tiles of 32 rows exceed the 65535 grid rows"):
        check.check(wl, simt, short, SM90)
    check.check(wl, simt, {**short, "split": 2, "bk": 8}, SM90)


@pytest.mark.parametrize("layout", ["NN", "TN", "NT"])
def test_a_bmm_reads_each_product_through_rank_3_tensor_maps(cuda_toolkit, layout):
    """A bmm's operands are rank-3 tensor maps (the product outermost, a box one product deep, the product's
    stride N x K or M x K elements) read by 3-D TMA copies at the grid row's product, and its kernel makes the
    mm kernel's shared loads and FMAs per K tile, without a stack frame or spills."""
    wl = parse_name(f"bmm/B192N128K128M64P{layout}")
    assert simt_operand.tensor_map(layout[0] == "N", 64, 128, 128, 8, batch=192)[:8] == \
        ([128, 128, 192, 512, 65536, 8, 64, 1] if layout[0] == "N" else [128, 128, 192, 512, 65536, 64, 8, 1])
    for config in valid_configs(wl, SM90, 3, seed=5, template=simt):
        source = source_of(wl, config)
        assert "async_bulk_tensor_3d" in source and "async_bulk_tensor_2d" not in source, config
        counts = instructions(source)
        fragments = config["tm"] * config["bk"] // 4 + config["tn"] // 4 * config["bk"]
        handed = (config["slices"] - 1) * config["tm"] * config["tn"] // 4
        assert counts.get("ld.shared.v4.f32", 0) == fragments + handed, (config, counts)
        assert counts["fma.rn.ftz.f32"] == config["tm"] * config["tn"] * config["bk"], config
        assert all(k.stack_bytes == 0 and k.spill_bytes == 0 for k in compile_kernels(source, "sm_90")), config


@pytest.mark.parametrize("split", [1, 2, 8])
def test_split_ctas_add_their_partial_tiles_through_distributed_shared_memory(cuda_toolkit, split):
    """A cluster of `split` CTAs: each sums 1/split of every thread's quads of sums from all of them (one 16-byte
    `ld.shared::cluster` per CTA and quad) and stores them in 16-byte stores; without a split, each thread stores
    its own quads."""
    wl = parse_name(LONG_K)
    config = {**simt.default_params(wl, True), "warps_r": 2, "warps_c": 2, "tm": 8, "tn": 8, "split": split}
    check.check(wl, simt, config, SM90)
    source = source_of(wl, config)
    counts = instructions(source)
    quads = 8 * 8 // 4
    assert counts.get("ld.shared::cluster.v4.f32", 0) == (quads if split > 1 else 0)
    assert counts["st.global.v4.f32"] == quads // split
    assert re.findall(r"for \(int t = 0; t < (\d+);", source)[0] == str(4096 // config["bk"] // split)


@pytest.mark.parametrize("slices,split", [(2, 1), (4, 1), (2, 2)])
def test_k_slices_take_alternate_tiles_and_hand_their_sums_to_slice_0(cuda_toolkit, slices, split):
    """`slices` s: s groups of consumer warps, each over every s-th K tile of the CTA with sums of its own; slices
    1.. write theirs to shared memory in 16-byte stores, and only slice 0 adds them up and stores C (a split CTA:
    its partial tile); within the register estimate, no local memory."""
    wl = parse_name(LONG_K)
    config = {**simt.default_params(wl, True), "warps_r": 2, "warps_c": 1, "stages": 4, "slices": slices,
              "split": split}
    check.check(wl, simt, config, SM90)
    threads = simt.resources(wl, config)["threads"]
    assert threads == (2 * slices + 1) * 32
    source = source_of(wl, config)
    # the K loop (`i_1`: the first loop TVM names `i` zeroes the sums)
    assert re.findall(r"for \(int i_1 = 0; i_1 < (\d+);", source)[0] == str(4096 // 32 // split // slices)
    handed = instructions(source)["st.shared.v4.f32"]
    assert handed == 16 * (2 if split > 1 else 1)  # slice 1.. its quads, then a split CTA's partial tile
    assert "if (((int)threadIdx.x) < 64)" in source  # slice 0 alone sums and stores
    assert all(k.stack_bytes == 0 and k.spill_bytes == 0 for k in compile_kernels(source, "sm_90"))


@pytest.mark.parametrize("producer", [0, 1])
def test_the_copies_come_from_a_warp_of_their_own_or_from_the_first_consumer(cuda_toolkit, producer):
    """`producer` 1 adds a warp whose first thread issues every copy; with 0 the first consumer thread issues the
    first `stages` tiles, then refills the previous tile's stage in the consumers' loop."""
    wl = parse_name(LONG_K)
    config = {**simt.default_params(wl, True), "slices": 1, "producer": producer}
    threads = simt.resources(wl, config)["threads"]
    assert threads == (4 + producer) * 32
    source = source_of(wl, config)
    assert f"__launch_bounds__({threads})" in source
    assert source.count("async_bulk_tensor_2d_shared__cluster_global_mbarrier__complete_tx__bytes(") == \
        1 + (2 if producer else 4)  # the helper's definition, then A's and B's copies where they are issued
    assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90"))


@pytest.mark.parametrize("cls", [OpEvoTuner, GBFSTuner, NA2CTuner], ids=lambda c: c.__name__)
def test_every_proposal_is_a_simt_kernel_the_device_runs(cls):
    """12755 of the space's 72576 configs are valid for mm/N512K4096M1024 on sm_90 (more threads than a block
    has, sums beyond the registers, stages beyond the shared memory, tiles beyond a TMA box, K slices without
    the producer warp or sharing stages): the tuners propose only those."""
    wl = parse_name(LONG_K)
    space = SearchSpace.from_json(simt.search_space(wl))
    rules = KernelRules(wl, simt, SM90)
    assert sum(not rules.problems(c) for c in space.values()) == 12755
    evaluate = stand_in(wl, simt, SM90)
    tuner = make_tuner(cls, simt.search_space(wl), workload=LONG_K, target="sm_90", seed=1)
    run = FakeNNI(tuner, lambda config: evaluate(config).report(), concurrency=4).run(40)
    assert len(run.proposed) == 40 and all(outcome is not None for outcome in run.outcomes)
    bmm = parse_name("bmm/B192N128K128M64PNN")  # BERT-base's probabilities x V, 12 heads x batch 16
    evaluate = stand_in(bmm, simt, SM90)
    tuner = make_tuner(cls, simt.search_space(bmm), workload=bmm.key, target="sm_90", seed=1)
    run = FakeNNI(tuner, lambda config: evaluate(config).report(), concurrency=4).run(40)
    assert len(run.proposed) == 40 and all(outcome is not None for outcome in run.outcomes)


def test_an_experiment_for_hopper_searches_the_simt_knobs(tmp_path):
    """Written for sm_90, a float32 mm experiment's space is the simt template's; written for whichever GPU runs
    it (`--arch auto`), the portable template's."""
    wl = parse_name(LONG_K)
    hopper = write.write(wl, tmp_path / "h", arch="sm_90")
    assert list(json.loads((hopper / "search_space.json").read_text())) == list(simt.search_space(wl))
    anywhere = write.write(wl, tmp_path / "a", arch="auto")
    assert list(json.loads((anywhere / "search_space.json").read_text())) == list(matmul.search_space(wl))


def test_loops_left_to_nvvm_make_the_same_instructions_from_a_fraction_of_the_source(cuda_toolkit):
    """`compile_kernel` leaves the `T.unroll` loops to NVVM (`#pragma unroll`); with `explicit_unroll` TVM unrolls
    them in the source.  NVRTC makes the same shared loads, FMAs and stores of either, from far less source."""
    wl = parse_name(LONG_K)
    config = simt.default_params(wl, True)
    sources = {explicit: simt.compile_kernel(simt.schedule(wl, config, SM90), SM90, explicit_unroll=explicit)
               .mod.imports[0].inspect_source() for explicit in (True, False)}
    assert "#pragma unroll" in sources[False] and "#pragma unroll" not in sources[True]
    assert len(sources[False]) * 5 < len(sources[True])
    assert sources[False] == source_of(wl, config)  # what a trial builds
    mix = [{name: n for name, n in instructions(source).items()
            if name.startswith(("ld.shared", "st.shared", "st.global", "fma"))} for source in sources.values()]
    assert mix[0] == mix[1] and mix[0]["fma.rn.ftz.f32"] == 8 * 8 * 32
