"""The CUDA kernels the templates generate, read without a GPU: vector accesses are aligned for their
width wherever the knob check passes a config, and blocks beyond 48 KiB use dynamic shared memory."""
import dataclasses
import random
import re

import pytest

from searchspace import ConstrainedSpace, SearchSpace
from trial import build, check, templates
from trial.archs import target_of
from trial.constraints import KernelRules
from trial.target import Target
from trial.templates import matmul, wgmma
from trial.workload import parse

from cuda_kernels import device_module, dynamic_shared_bytes, vector_accesses
from nvrtc import cuda_toolkit, ptx  # noqa: F401

SM90 = target_of("sm_90")
STATIC_ONLY = dataclasses.replace(SM90, limits=dataclasses.replace(SM90.limits, max_shared_memory_per_block_optin=0))

WORKLOADS = [("mm", "N512K1024M1024"), ("mm", "N512K1024M4096"), ("mm", "N512K4096M1024"),
             ("bmm", "B960N128K128M64PNN"), ("bmm", "B960N128K128M64PTN"), ("bmm", "B960N128K64M128PNT"),
             ("mm", "N768K3072M768PTT"), ("mm", "N1000K768M197PNT"), ("bmm", "B1N197K64M768PNT"),
             ("mm", "N49K1000M768PNN")]


def vectorised_configs(op, spec, target, count, seed=0):
    """`count` configs of the constrained space on `target` that load with vectors (vec > 1)."""
    wl = parse(op, spec)
    template = templates.load(wl)
    space = ConstrainedSpace.of(SearchSpace.from_json(template.search_space(wl)), KernelRules(wl, template, target))
    rng = random.Random(seed)
    found = [c for c in (space.sample(rng) for _ in range(200)) if c["vec"] > 1][:count]
    assert len(found) == count, f"{op}/{spec}: fewer than {count} vectorised configs in 200 samples"
    return wl, template, found


@pytest.mark.parametrize("op,spec", WORKLOADS)
def test_vector_accesses_of_valid_configs_are_aligned(op, spec):
    """Every vector load, store and asynchronous copy of the kernel starts at a multiple of its width,
    for every value the thread and loop indices can take (TVM's modular-set analysis of the index).
    Each operand is read in vectors of `vec`, but for a transposing copy into a pipeline of asynchronous
    copies, which copies element by element."""
    wl, template, configs = vectorised_configs(op, spec, SM90, 3)
    for config in configs:
        check.check(wl, template, config, SM90)
        accesses = vector_accesses(device_module(template.schedule(wl, config, SM90), SM90))
        vectorised = {name for name, moved in zip("AB", matmul.transposed(wl, config))
                      if not (moved and config["pipeline"] >= 2)}
        assert {a.buffer for a in accesses} & {"A", "B"} == vectorised, config
        assert {a.lanes for a in accesses} <= {config["vec"]}, config
        assert all(a.aligned for a in accesses), (config, [a for a in accesses if not a.aligned])


@pytest.mark.parametrize("spec,config", [
    ("N36K36M36PTT", {"K": [1, 1, 18, 2], "X": [4, 9, 1, 1], "Y": [3, 12, 1, 1], "unroll": 1500, "vec": 4, "pipeline": 4,
                      "kmajor": 0, "pad": 0}),
    ("N24K36M30PTN", {"K": [1, 9, 4, 1], "X": [1, 2, 1, 12], "Y": [5, 2, 1, 3], "unroll": 64, "vec": 4, "pipeline": 2,
                      "pad": 0}),
])
def test_vector_widths_the_rule_rejects_would_be_misaligned(spec, config):
    """What the template's vector rule keeps out: a width that does not divide the staged tile's
    contiguous extent (9 rows of A, 6 columns of B here) makes TVM emit vectors that start off their
    alignment (cudaErrorMisalignedAddress on a GPU)."""
    wl = parse("mm", spec)
    template = templates.load(wl)
    with pytest.raises(check.InvalidConfig, match="vec 4 does not divide"):
        check.check(wl, template, config, SM90)
    accesses = vector_accesses(device_module(template.schedule(wl, config, SM90), SM90))
    assert any(not a.aligned for a in accesses)


@pytest.mark.parametrize("spec", ["N512C64HW27F192K5ST1PD2", "N8C32HW17F40K3ST1PD1"])
def test_winograd_vectors_are_aligned(spec):
    """The Winograd product's vector loads (wino_vec) and its vector stores of M (wino_p[3] adjacent tiles,
    the tile count padded to a multiple of 32) start at multiples of their widths."""
    wl = parse("conv", spec)
    template = templates.load(wl)
    space = ConstrainedSpace.of(SearchSpace.from_json(template.search_space(wl)), KernelRules(wl, template, SM90))
    rng = random.Random(2)
    drawn = (space.sample(rng) for _ in range(400))
    configs = [c for c in drawn if c["algorithm"] == "winograd" and c["wino_vec"] > 1 and c["wino_p"][3] in (2, 4)][:2]
    assert len(configs) == 2
    for config in [template.default_params(wl, True), *configs]:
        accesses = vector_accesses(device_module(template.schedule(wl, config, SM90), SM90))
        stores = [a for a in accesses if a.buffer == "C"]
        assert {a.lanes for a in stores} == {config["wino_p"][3]} and len(stores) < len(accesses), config
        assert all(a.aligned for a in accesses), (config, [a for a in accesses if not a.aligned])


def test_generated_cuda_uses_the_vectors():
    """The aligned vectors reach the CUDA source: float4 loads, or 16-byte cp.async with `pipeline` >= 2."""
    wl = parse("mm", "N512K1024M1024PTN")
    template = templates.load(wl)
    for depth, vector in [(1, "float4"), (2, "cp.async.cg.shared.global [%0], [%1], %2;\"\n    :: \"r\"(dst_addr), \"l\"(src_p), \"n\"(16)")]:
        config = {**template.default_params(wl, True), "vec": 4, "pipeline": depth}
        source = build.build(wl, template, config, SM90).mod.imports[0].inspect_source()
        assert vector in source, depth


@pytest.mark.parametrize("op,spec,change", [
    ("mm", "N512K1024M1024", {"K": [1, 64, 16, 1], "pipeline": 4}),
    ("bmm", "B960N128K128M64PTN", {"K": [1, 2, 16, 4], "pipeline": 3}),
    ("conv", "N512C64HW27F192K5ST1PD2", {"algorithm": "direct", "tile_rc": [2, 32], "pipeline": 2}),
    ("conv", "N512C64HW27F192K5ST1PD2", {"wino_c": [1, 64, 1], "wino_pipeline": 2}),
])
def test_blocks_beyond_48k_use_dynamic_shared_memory(op, spec, change):
    """Above the static 48 KiB a block's tiles go to dynamic shared memory, as much as the estimate
    says, up to the device's opt-in maximum; a device without opt-in rejects the config."""
    wl = parse(op, spec)
    template = templates.load(wl)
    config = {**template.default_params(wl, True), **change}
    estimate = template.resources(wl, config)["shared_bytes"]
    assert 48 * 1024 < estimate <= SM90.limits.shared_memory_per_block
    check.check(wl, template, config, SM90)
    assert dynamic_shared_bytes(device_module(template.schedule(wl, config, SM90), SM90)) == estimate
    source = build.build(wl, template, config, SM90).mod.imports[0].inspect_source()
    assert "extern __shared__" in source and not re.search(r"^\s*__shared__", source, re.M)
    with pytest.raises(check.InvalidConfig, match=f"{estimate} bytes of shared memory per block > device limit 49152"):
        check.check(wl, template, config, STATIC_ONLY)


def test_shared_memory_limit_is_the_architectures_opt_in():
    """227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_89; one byte more is invalid."""
    wl = parse("mm", "N4096K4096M4096")
    template = templates.load(wl)
    for arch, kib in [("sm_90", 227), ("sm_80", 163), ("sm_89", 99)]:
        target = target_of(arch)
        assert target.limits.shared_memory_per_block == kib * 1024
        too_big = {**template.default_params(wl, True), "X": [16, 2, 8, 16], "Y": [16, 2, 8, 16],
                   "K": [1, 4096 // 64, 64, 1], "pipeline": 4}
        with pytest.raises(check.InvalidConfig, match=f"device limit {kib * 1024}"):
            check.check(wl, template, too_big, target)


def test_descriptions_written_before_the_opt_in_limit_keep_the_static_one():
    """A device description recorded by an older experiment writer has no opt-in field: static 48 KiB."""
    old = SM90.describe()
    del old["limits"]["max_shared_memory_per_block_optin"]
    assert Target.from_description(old).limits.shared_memory_per_block == 48 * 1024
    assert Target.from_description(SM90.describe()) == SM90


@pytest.mark.parametrize("spec,knobs", [("N512K4096M1024_f16", {"rows": 64, "cols": 64, "producer": 1, "cluster": 2}),
                                         ("N512K4096M1024_f16", {"rows": 128, "cols": 64, "producer": 1, "split": 2})])
def test_a_clusters_ctas_read_their_cluster_id_and_rank_once_not_at_each_copy(spec, knobs):
    """TVM reads a CTA's cluster id and rank through volatile `asm`, which nvcc neither hoists out of a loop nor
    merges: the wgmma kernel keeps both in registers, so that no TMA copy (the producer issues each right after its
    wait for a free stage) reads and divides them again, nor any address in a peer CTA's shared memory (`mapa`)."""
    wl = parse("mm", spec)
    template = templates.load(wl, target=SM90)
    config = {**template.default_params(wl, True), **knobs}
    check.check(wl, template, config, SM90)
    kernel = build.build(wl, template, config, SM90).mod.imports[0].inspect_source().split("__global__")[-1]
    reads = re.compile(r"fetch_register_clusterid_x\(\)|cluster_ctaid_x\(\)")
    copies = [line for line in kernel.splitlines() if "cp_async_bulk_tensor" in line]
    peers = [line for line in kernel.splitlines() if "mapa_u32" in line]
    assert copies and peers  # a pair's releases to its peer, or split CTAs' loads of each other's partial sums
    assert not [line for line in copies + peers if reads.search(line)]


@pytest.mark.parametrize("spec,knobs", [("N512K4096M1024_bf16", {"stages": 9, "split": 2}),
                                         ("N512K4096M1024PTN_f16", {"stages": 8, "split": 2}),
                                         ("N512K4096M1024_f16", {"rows": 64, "stages": 9, "cluster": 2})])
def test_the_producers_k_loop_stays_a_loop_unrolled_by_two(cuda_toolkit, spec, knobs):
    """Without volatile reads in its body NVRTC would unroll the producer's loop over its 32 or 64 K tiles in full,
    into kilobytes of code that each CTA runs once; unrolled by 2, the PTX holds two K tiles' TMA copies."""
    wl = parse("mm", spec)
    config = {**wgmma.default_params(wl, True), "rows": 128, "cols": 64, "in_flight": 1, "producer": 1, **knobs}
    check.check(wl, wgmma, config, SM90)
    source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
    per_tile = source.split("__global__")[-1].count("cp_async_bulk_tensor")  # the loop body's: a K tile's copies
    assert per_tile and ptx(source, "sm_90a").count("cp.async.bulk.tensor") == 2 * per_tile
