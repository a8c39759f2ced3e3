"""Batched matmul (bmm) on the Hopper warpgroup-MMA template, in every type it takes: B products of an N x K and a
K x M matrix in one launch, the grid's rows every product's row tiles in turn, the operands read through rank-3
tensor maps (the product outermost).  Checked without a GPU: the tensor maps and TMA coordinates; every thread's
stores to C and every copy, traced through the kernel's TIR for the whole grid (each element of C stored once,
by a CTA that loaded its product's rows of A and columns of B, all of K); the kernels compiled as a GPU machine
compiles them (NVRTC, then ptxas for sm_90a) without local memory; and the grid's row limit."""
import numpy as np
import pytest

from trial import build, check, templates
from trial.archs import target_of
from trial.measure import Options, measure
from trial.templates import matmul, tensorcore, wgmma
from trial.templates.wgmma_operand import Operand
from trial.workload import SpecError, parse_name

from nvrtc import compile_kernels, cuda_toolkit  # noqa: F401
from tirx_indices import trace

SM90, SM80 = target_of("sm_90"), target_of("sm_80")
FAST = Options(target="llvm", min_repeat_ms=1)


@pytest.mark.parametrize("name", ["bmm/B960N128K64M128PNT_f16", "bmm/B4N128K64M128PTN_bf16",
                                  "bmm/B4N128K128M128PNT_i8", "bmm/B4N128K128M128PNT_e4m3",
                                  "bmm/B4N128K64M128PNT_tf32"])
def test_bmm_gets_the_wgmma_template_on_hopper_only(name):
    wl = parse_name(name)
    assert wgmma.takes(wl) and wgmma.applies(wl, SM90)
    assert not wgmma.applies(wl, SM80) and not wgmma.applies(wl, None)
    assert templates.load(wl, target=SM90) is wgmma
    portable = matmul if wl.element.input_bits else tensorcore  # TF32: float32 on the CUDA cores
    assert templates.load(wl, target=SM80) is portable and templates.load(wl) is portable
    assert templates.candidates(wl) == [wgmma, portable]


def test_8_bit_bmm_with_an_mn_major_operand_keeps_the_tensor_core_template():
    for name in ("bmm/B4N128K128M128_i8", "bmm/B4N128K128M128PNN_e4m3"):
        wl = parse_name(name)
        assert not wgmma.takes(wl) and templates.load(wl, target=SM90) is tensorcore


def test_a_batched_operands_tensor_map_is_of_rank_3_with_the_product_outermost():
    """Dims and box innermost first, then the strides in bytes (a row's, a matrix's), the box one matrix deep,
    element strides 1; the coordinates end with the product.  Unbatched: the rank-2 map, unchanged."""
    # A of N* (N x K, K-major), float16: K 64 x N 256 per product, 6 products
    a = Operand(True, 128, 256, 64, itemsize=2, batch=6)
    assert a.rank == 3 and a.tensor_map == [64, 256, 6, 128, 256 * 64 * 2, 64, 128, 1, 1, 1, 1, 0, 3, 2, 0]
    assert a.coords(3, 128, 0, 0, 5) == (3 * 64, 128, 5)
    # A of T* (K x N, MN-major): N 256 innermost, 64 x 64 boxes
    a_t = Operand(False, 128, 256, 64, itemsize=2, batch=6)
    assert a_t.tensor_map == [256, 64, 6, 512, 256 * 64 * 2, 64, 64, 1, 1, 1, 1, 0, 3, 2, 0]
    assert a_t.coords(0, 128, 1, 0, 2) == (128 + 64, 0, 2)
    # B of *T (M x K, K-major), TF32 (4 bytes, 32-deep K tiles), shared by a cluster of 2: half the rows each
    b = Operand(True, 128, 192, 96, parts=2, itemsize=4, batch=3)
    assert b.tensor_map == [96, 192, 3, 96 * 4, 192 * 96 * 4, 32, 64, 1, 1, 1, 1, 0, 3, 2, 0]
    assert b.coords(2, 64, 0, 1, 1) == (64, 64 + 64, 1)
    # B of *N (K x M, MN-major), bfloat16, a cluster's halves of the K rows
    b_n = Operand(False, 128, 192, 128, parts=2, itemsize=2, batch=3)
    assert b_n.tensor_map == [192, 128, 3, 384, 192 * 128 * 2, 64, 32, 1, 1, 1, 1, 0, 3, 2, 0]
    assert b_n.coords(1, 0, 1, 1, 2) == (64, 64 + 32, 2)
    plain = Operand(True, 128, 256, 64, itemsize=2)
    assert plain.rank == 2 and plain.tensor_map == [64, 256, 128, 64, 128, 1, 1, 0, 3, 2, 0]
    assert plain.coords(3, 128, 0, 0, 5) == (3 * 64, 128)


def test_the_kernel_encodes_both_rank_3_maps_and_indexes_c_by_product():
    wl = parse_name("bmm/B5N128K64M192PTN_f16")
    script = wgmma.kernel(wl, {**wgmma.default_params(wl, True), "rows": 64, "cols": 64}).script()
    assert 'cuTensorMapEncodeTiled", a_map, "float16", 3, A.data, 128, 64, 5, 256, 16384, 64, 64, 1, 1, 1, 1, ' \
           '0, 3, 2, 0)' in script
    assert 'cuTensorMapEncodeTiled", b_map, "float16", 3, B.data, 192, 64, 5, 384, 24576, 64, 64, 1, 1, 1, 1, ' \
           '0, 3, 2, 0)' in script
    assert 'C_in: T.Buffer((5, 128, 192), "float16"' in script and '"3d"' in script and '"2d"' not in script
    assert 'C = T.decl_buffer((5, 128, 192), "float16", data=C_in.data)' in script


def tile_problems(wl, p, tr):
    """What breaks the tiling in `tr` (a `trace` of `wl`'s kernel with knobs `p`): each element of C stored once;
    each CTA stores one product's block tile (its share of the columns, where split) and loaded that product's
    rows of A, and with its cluster, that product's columns of B and all of K."""
    d = wl.dims
    batch, depth = d.get("B", 1), 128 // wl.element.itemsize
    rows, cols, cluster, split = p["rows"], p["cols"], p["cluster"], p["split"]
    idx, cta = tr.stored()
    if ((idx < 0) | (idx >= np.array(wl.output_shape))).any():
        return ["stores outside C"]
    counts = np.bincount(np.ravel_multi_index(idx.T, wl.output_shape), minlength=int(np.prod(wl.output_shape)))
    problems = [] if (counts == 1).all() else [f"{(counts != 1).sum()} elements of C not stored exactly once"]
    idx = idx if batch > 1 else np.c_[np.zeros(len(idx), np.int64), idx]  # mm: product 0
    loads = {}
    operands = (("a_map", wl.layout[0] == "N", rows), ("b_map", wl.layout[1] == "T", cols // cluster))
    for name, k_major, extent in operands:
        coords, owner = tr.copies[name].all()
        coords = coords if batch > 1 else np.c_[coords, np.zeros(len(coords), np.int64)]
        row, k = (coords[:, 1], coords[:, 0]) if k_major else (coords[:, 0], coords[:, 1])
        loads[name] = (owner, coords[:, 2], row, k, extent if k_major else 64)  # a box's rows (or columns)
    for c in range(tr.ctas):
        matrix, r, col = (np.unique(idx[cta == c, i]) for i in range(3))
        if len(matrix) != 1 or len(r) != rows or r[0] % rows or np.ptp(r) != rows - 1 or len(col) != cols // split:
            problems.append(f"CTA {c} stores products {matrix}, {len(r)} rows from {r[:1]}, {len(col)} columns")
            continue
        cluster_of_c = np.flatnonzero(tr.cluster_of == tr.cluster_of[c])
        for name, (owner, product, row, k, extent) in loads.items():
            mine = np.isin(owner, cluster_of_c) if name == "b_map" else owner == c  # B: shared in a cluster
            covered = np.unique((row[mine][:, None] + np.arange(extent)).ravel())
            if set(product[np.isin(owner, cluster_of_c)]) != set(matrix):
                problems.append(f"CTA {c} stores product {matrix} but its cluster loads {name} of others")
            if name == "a_map" and not np.array_equal(covered, r):
                problems.append(f"CTA {c} stores rows {r[0]}.. but loads A's {covered[:1]}.. ({len(covered)})")
            if name == "b_map" and (len(covered) != cols or covered[0] % cols or not set(col) <= set(covered)):
                problems.append(f"CTA {c} stores columns {col[0]}.. but its cluster loads B's {covered[:1]}..")
            if set(k[np.isin(owner, cluster_of_c)] // depth * depth) != set(range(0, d["K"], depth)):
                problems.append(f"CTA {c}'s cluster does not load every K tile of {name}")
    return problems


TILINGS = [("bmm/B3N256K128M192PTN_f16", {"rows": 64, "cols": 64, "producer": 1, "cluster": 2, "epilogue": 0}),
           ("bmm/B3N256K128M256PNT_f16", {"rows": 128, "cols": 128, "producer": 1, "cluster": 2}),
           ("bmm/B3N256K128M128PNN_bf16", {"rows": 64, "cols": 64, "producer": 1, "split": 2}),
           ("bmm/B3N256K256M128PTT_f16", {"rows": 128, "cols": 64, "producer": 1, "split": 4, "epilogue": 0}),
           ("bmm/B3N192K256M128PTT_bf16", {"rows": 64, "producer": 1, "stages": 4, "slices": 2}),
           ("bmm/B3N128K256M128PNT_f16", {"rows": 64, "cols": 64, "epilogue": 0}),
           ("bmm/B2N128K256M128PNT_i8", {"rows": 64, "cols": 64, "producer": 1, "split": 2}),
           ("bmm/B2N128K256M192PNT_e4m3", {"rows": 64, "cols": 192, "producer": 1, "cluster": 2, "epilogue": 0}),
           ("bmm/B3N128K128M128PNT_tf32", {"rows": 64, "cols": 64, "producer": 1, "cluster": 2}),
           ("bmm/B3N128K128M128PNT_tf32", {"cols": 64, "producer": 1, "split": 2}),
           ("mm/N256K128M192PTN_f16", {"rows": 64, "cols": 64, "producer": 1, "cluster": 2})]


@pytest.mark.parametrize("name,knobs", TILINGS)
def test_every_cta_stores_the_tile_of_the_product_it_loaded(name, knobs):
    """Every layout, type and way of sharing: the indices of every thread's stores and the coordinates of every
    copy, evaluated from the kernel's TIR for the whole grid (mm too, where the product is 0)."""
    wl = parse_name(name)
    config = {**wgmma.default_params(wl, True), **knobs}
    check.check(wl, wgmma, config, SM90)
    assert tile_problems(wl, config, trace(wgmma.kernel(wl, config))) == []


COMPILED = [("bmm/B960N128K64M128PNT_f16", {}),
            ("bmm/B4N256K256M128PTN_f16", {"rows": 64, "producer": 1, "cluster": 2, "epilogue": 0}),
            ("bmm/B4N256K256M128PTT_bf16", {"producer": 1, "split": 2}),
            ("bmm/B4N128K256M128PNN_bf16", {"rows": 64, "producer": 1, "stages": 4, "slices": 2}),
            ("bmm/B4N128K256M128PNT_i8", {"producer": 1, "split": 2, "epilogue": 0}),
            ("bmm/B4N256K256M128PNT_e4m3", {"rows": 64, "producer": 1, "cluster": 2}),
            ("bmm/B960N128K64M128PNT_tf32", {}),
            ("bmm/B4N256K128M128PNT_tf32", {"rows": 64, "producer": 1, "stages": 4, "slices": 2, "epilogue": 0})]


@pytest.mark.parametrize("name,knobs", COMPILED)
def test_bmm_kernels_compile_for_sm_90a_without_local_memory(cuda_toolkit, name, knobs):
    """Each type's wgmma, both operands copied by rank-3 TMA copies (a cluster's B multicast), C in its type."""
    wl = parse_name(name)
    config = {**wgmma.default_params(wl, True), **knobs}
    check.check(wl, wgmma, config, SM90)
    source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
    kernel = source[source.index("__global__ void __launch_bounds__"):]
    assert "async_bulk_tensor_3d_shared" in kernel and "async_bulk_tensor_2d" not in kernel
    assert ("multicast" in kernel) == (config["cluster"] > 1)
    assert f"m64n{config['cols']}k" in kernel
    out = {"float16": "half", "bfloat16": "nv_bfloat16", "float32": "float", "int32": "int"}[wl.out_dtype]
    assert f"main_kernel({out}* __restrict__ C_ptr" in kernel
    reports = compile_kernels(source, "sm_90a")
    assert reports and all(k.stack_bytes == 0 for k in reports), config


def test_the_grids_rows_stay_within_cudas_limit():
    """Without clusters, gridDim.y holds every product's row tiles: at most 65535.  Taller tiles or a cluster
    (a flat grid) fit; where the default config's grid does not, the template does not apply."""
    wl = parse_name("bmm/B40000N128K32M64PNT_tf32")
    low = {**wgmma.default_params(wl, True), "rows": 64, "cols": 64, "stages": 2}
    with pytest.raises(check.InvalidConfig, match="80000 row tiles of 64 rows \\(N 128 x B 40000\\) exceed the 65535 "
                                                  "grid rows \\(gridDim.y\\) CUDA launches"):
        check.check(wl, wgmma, low, SM90)
    check.check(wl, wgmma, {**low, "rows": 128}, SM90)
    check.check(wl, wgmma, {**low, "producer": 1, "cluster": 2}, SM90)
    assert wgmma.applies(wl, SM90)  # the default's 128-row tiles: 40000 grid rows
    tall = parse_name("bmm/B70000N64K32M64PNT_tf32")
    assert not wgmma.applies(tall, SM90) and templates.load(tall, target=SM90) is matmul
    f16 = parse_name("bmm/B40000N192K64M64_f16")  # 64-row tiles: 120000 grid rows
    assert not wgmma.applies(f16, SM90) and templates.load(f16, target=SM90) is tensorcore
    assert wgmma.rows_of_tiles(parse_name("mm/N512K64M64_f16"), 128) == 4


def test_tf32_bmm_is_k_major_and_verifies_on_the_cpu_as_float32():
    """TF32 bmm parses where both operands are K-major (PNT), and elsewhere says so; on the CPU the float32
    template computes it from inputs TF32 holds exactly, checked against the reference."""
    wl = parse_name("bmm/B3N64K64M128PNT_tf32")
    assert (wl.op, wl.dtype, wl.output_shape) == ("bmm", "tfloat32", (3, 64, 128))
    for layout in ("NN", "TN", "TT"):
        with pytest.raises(SpecError, match=f"bad bmm spec 'B3N64K64M128P{layout}_tf32': tf32 kernels are mm or bmm "
                                            "with both operands K-major \\(PNT"):
            parse_name(f"bmm/B3N64K64M128P{layout}_tf32")
    with pytest.raises(SpecError, match="K=48 is not a multiple of 32"):
        parse_name("bmm/B3N64K48M128PNT_tf32")
    r = measure(wl, None, FAST)
    assert r.status == "ok" and r.gflops > 0, r.reason


def test_a_products_last_row_tile_stops_at_its_own_n(cuda_toolkit):
    """192-row tiles of 128-row products: one tile a product, whose third warpgroup's rows are past N (read as
    zeros from the rank-3 tensor map, whose box stops at the product's rows) and stored by no thread."""
    wl = parse_name("bmm/B4N128K64M128PNT_f16")
    config = {**wgmma.default_params(wl, True), "rows": 192, "cols": 128, "stages": 2, "epilogue": 0}
    check.check(wl, wgmma, config, SM90)
    assert wgmma.rows_of_tiles(wl, 192) == 4
    source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
    assert "__launch_bounds__(384)" in source
    assert source.count("if (((int)threadIdx.x) < 256) {") == 2 * 128 // 8  # rows r and r + 8 of each 8-column group

