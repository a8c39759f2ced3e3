"""The protocol's workload sets: every spec parses, no workload is in two sets, each names its model."""
import pytest

from benchmarks import handpicked, workloads
from trial.workload import parse_name


def test_every_workload_parses_and_names_its_model():
    for name, entries in workloads.SETS.items():
        keys = [parse_name(e.workload).key for e in entries]
        assert len(set(keys)) == len(keys), name  # no workload twice in a set
        assert all(e.model.strip() for e in entries), name
    assert [e.workload for e in workloads.STUDY] == handpicked.STUDY
    assert set(workloads.QUICK) <= set(workloads.STUDY) | set(workloads.HELD_OUT)


def test_the_sets_do_not_overlap_even_when_spelt_differently():
    study = {parse_name(e.workload).key for e in workloads.STUDY}
    held_out = {parse_name(e.workload).key for e in workloads.HELD_OUT}
    assert not study & held_out
    assert parse_name("mm/N512K1024M1024PNN").key in study  # the canonical key sees through the default layout


def test_held_out_covers_the_shapes_the_protocol_promises():
    parsed = [parse_name(e.workload) for e in workloads.HELD_OUT]
    convs = [w.dims for w in parsed if w.op == "conv"]
    assert {d["K"] for d in convs} >= {1, 3, 7} and any(d["ST"] == 2 for d in convs)
    assert {d["N"] for d in convs} >= {1, 32}
    widths = {w.dims["M"] for w in parsed if w.op == "mm"}
    assert any(m & (m - 1) for m in widths)  # a width that is not a power of two
    halves = [w for w in parsed if w.dtype == "float16"]
    fp32 = {w.key for w in parsed if w.op in ("mm", "bmm") and w.dtype == "float32"}
    assert halves and all(w.key.removesuffix("_f16") in fp32 for w in halves)


def test_chosen_names_the_sets_and_rejects_others():
    assert list(workloads.chosen("all")) == ["study", "held-out"]
    assert workloads.chosen("held-out") == {"held-out": workloads.HELD_OUT}
    with pytest.raises(ValueError, match="unknown workload set 'train'"):
        workloads.chosen("train")


def test_a_workload_given_by_name_keeps_the_model_its_set_names():
    qkv = next(e for e in workloads.HELD_OUT if e.workload == "mm/N2048K768M2304PNT_f16")
    assert workloads.entry("mm/N2048K768M2304PNT_f16") == qkv
    assert workloads.entry("mm/N512K1024M1024PNN") == workloads.STUDY[0]  # spelt otherwise, the same workload
    assert workloads.entry("mm/N64K64M64") == workloads.Entry("mm/N64K64M64", "given on the command line")
    with pytest.raises(ValueError):
        workloads.entry("mm/N64")
