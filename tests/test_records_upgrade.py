"""Records made before a template gained knobs: read as the template takes them now, or still passed over."""
import dataclasses
import json

import pytest

from searchspace import SearchSpace
from trial.measure import Options, measure
from trial.records import Records, as_template_takes, cli
from trial.results import MeasureResult
from trial.templates import conv2d, matmul, tensorcore, wgmma
from trial.workload import parse, parse_name
from tuners.warm import recorded_best

WL = parse("mm", "N32K32M32")
NEW = {"K": [2, 1, 4, 4], "X": [2, 1, 4, 4], "Y": [1, 2, 2, 8], "unroll": 16, "vec": 1, "pipeline": 0,
       "kmajor": 0, "pad": 0}
OLD = {k: v for k, v in NEW.items() if k not in ("kmajor", "pad")}
"""A config of WL as recorded before `kmajor` and `pad`, and as the template takes it now."""
CONV = parse_name("conv/N512C64HW27F192K5ST1PD2")  # stride 1, 5x5: the algorithm knob applies


def best_of(tmp_path, wl, *configs, device="gpu A"):
    """The fitting records, best first, of a store holding `configs`, the first fastest."""
    store = Records(tmp_path / "r.sqlite")
    for i, params in enumerate(configs):
        store.append(wl, MeasureResult("ok", params=params, gflops=100.0 - i, device=device))
    return store.best(wl.key, device, n=len(configs), fits=as_template_takes(wl))


def test_an_mm_record_from_before_kmajor_and_pad_comes_back_with_both_at_0(tmp_path):
    assert [r.params for r in best_of(tmp_path, WL, OLD)] == [NEW]
    tn = parse("mm", "N32K32M32PTN")  # no operand runs along K: no kmajor
    assert "kmajor" not in matmul.search_space(tn)
    assert [r.params for r in best_of(tmp_path, tn, OLD)] == [{**OLD, "pad": 0}]


def test_present_values_are_kept_and_one_kernel_is_listed_once(tmp_path):
    tuned = {**NEW, "kmajor": 1, "pad": 4}
    found = best_of(tmp_path, WL, tuned, OLD, NEW)  # OLD and NEW are one kernel
    assert [r.params for r in found] == [tuned, NEW] and [r.gflops for r in found] == [100.0, 99.0]
    assert matmul.upgrade(WL, OLD) == NEW and "pad" not in OLD  # a new dict: the record's own is left alone


def test_a_direct_conv_record_from_before_the_algorithm_knob_gets_it_and_inert_winograd_knobs(tmp_path):
    direct = {k: v for k, v in conv2d.default_params(CONV, False).items()
              if k != "algorithm" and not k.startswith("wino_")}
    space = SearchSpace.from_json(conv2d.search_space(CONV))
    (found,) = best_of(tmp_path, CONV, direct)
    assert found.params["algorithm"] == "direct" and space.contains(found.params)
    assert {k: v for k, v in found.params.items() if k in direct} == direct
    assert {k: v for k, v in found.params.items() if k.startswith("wino_")} == \
        {k: p.least for k, p in space.params.items() if k.startswith("wino_")}


@pytest.mark.parametrize("spec", ["conv/N512C3HW227F64K11ST4PD0", "conv/N512C64HW27F192K5ST1PD2"])
def test_a_direct_conv_record_from_before_tile_n_gave_each_block_one_image(tmp_path, spec):
    wl = parse_name(spec)
    direct = {"algorithm": "direct"} if "algorithm" in conv2d.search_space(wl) else {}
    tuned = {**conv2d.default_params(wl, True), **direct}
    old = {k: v for k, v in tuned.items() if k != "tile_n"}
    (found,) = best_of(tmp_path, wl, old)
    assert {k: v for k, v in found.params.items() if k in tuned} == {**tuned, "tile_n": [512, 1, 1, 1]}


def test_a_winograd_record_from_before_wino_kmajor_and_pad_gets_both_at_0(tmp_path):
    wino = {k: v for k, v in conv2d.default_params(CONV, True).items() if k not in ("wino_kmajor", "wino_pad")}
    (found,) = best_of(tmp_path, CONV, wino)
    assert found.params == {**wino, "wino_kmajor": 0, "wino_pad": 0}


@pytest.mark.parametrize("stale", [
    {**OLD, "K": [2, 4, 4]},  # before split-K: no upgrade known
    {**OLD, "K": [2, 1, 4, 2]},  # factors of 16, not of K 32
    {**NEW, "swizzle": 1},  # a knob the template does not have
    {**OLD, "pad": 3},  # a value it does not have
    None,  # an imported metric without params
])
def test_records_no_upgrade_fits_are_still_passed_over(tmp_path, stale):
    assert best_of(tmp_path, WL, stale) == []


def test_tensor_core_records_from_before_split_k_and_wgmma_ones_before_split(tmp_path):
    f16 = parse_name("mm/N512K1024M1024_f16")
    mma = tensorcore.default_params(f16, True)
    hopper = {k: v for k, v in wgmma.default_params(f16, True).items() if k not in ("split", "slices")}
    found = best_of(tmp_path, f16, {**mma, "K": mma["K"][1:]}, hopper)
    assert [r.params for r in found] == [mma, {**hopper, "split": 1, "slices": 1}]


def test_warm_start_proposes_the_upgraded_config_where_the_space_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OPEVO_RECORDS", str(tmp_path / "r.sqlite"))
    best_of(tmp_path, WL, {**OLD, "K": [2, 4, 4]}, OLD)
    assert recorded_best(WL.key, "gpu A", 5, SearchSpace.from_json(matmul.search_space(WL))) == [NEW]
    original = SearchSpace.from_json({k: v for k, v in matmul.search_space(WL).items() if k not in ("kmajor", "pad")})
    assert recorded_best(WL.key, "gpu A", 5, original) == [OLD]  # a space of the knobs as recorded: as recorded


def test_export_of_an_upgraded_record(tmp_path):
    result = measure(WL, NEW, Options(target="llvm", min_repeat_ms=1))
    assert result.status == "ok"
    store = Records(tmp_path / "r.sqlite")
    store.append(WL, dataclasses.replace(result, params=OLD), "exp", "t0", "opevo")
    out = tmp_path / "export"
    assert cli.main(["--records", str(store.path), "export", WL.key, "--out", str(out), "--target", "llvm"]) == 0
    assert json.loads((out / "params.json").read_text()) == NEW
    report = json.loads((out / "report.json").read_text())
    assert report["params"] == NEW and report["tuned"]["gflops"] > 0
