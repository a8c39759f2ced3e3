"""The protocol's workload sets: every spec parses, no workload is both a study and a held-out one, each names
its model, the tensor-core set holds every type on the template and layout it runs on."""
import pytest

from benchmarks import handpicked, workloads
from trial.workload import parse_name


def test_every_workload_parses_and_names_its_model():
    for name, entries in workloads.SETS.items():
        keys = [parse_name(e.workload).key for e in entries]
        assert len(set(keys)) == len(keys), name  # no workload twice in a set
        assert all(e.model.strip() for e in entries), name
    assert [e.workload for e in workloads.STUDY] == handpicked.STUDY
    assert all(workloads.QUICK[name] in entries for name, entries in workloads.SETS.items())


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


def test_the_tensor_core_set_holds_every_type_on_study_and_model_shapes():
    parsed = [parse_name(e.workload) for e in workloads.TENSOR_CORES]
    by_type = {}
    for w in parsed:
        by_type.setdefault(w.dtype, set()).add(w.op)
    assert by_type == {"float16": {"mm", "bmm", "conv"}, "bfloat16": {"mm", "bmm"}, "tfloat32": {"mm", "bmm", "conv"},
                       "int8": {"mm"}, "float8_e4m3fn": {"mm"}}

    def shape(key):  # a matmul's key without its type and layout
        return key.split("_")[0][:-3]

    gemm_shapes = {shape(parse_name(e.workload).key) for e in (*workloads.STUDY, *workloads.HELD_OUT)}
    assert all(shape(w.key) in gemm_shapes for w in parsed if w.op != "conv")
    k_major = [w for w in parsed if w.op != "conv" and (w.element.itemsize == 1 or w.dtype == "tfloat32")]
    assert k_major and all(w.layout == "NT" for w in k_major)
    assert all(w.layout == "NHWC" for w in parsed if w.op == "conv")
    assert sum(w.op == "conv" and w.dtype == "float16" for w in parsed) == 11  # ResNet-50's 3x3 and 1x1 layers
    labels = {e.model for e in workloads.TENSOR_CORES}
    assert "ResNet-50, batch 32: layer2 3x3, stride 2, float16" in labels
    assert "BERT-base, batch 16 x seq 128: FFN down, bfloat16" in labels


def test_chosen_names_the_sets_and_rejects_others():
    assert list(workloads.chosen("all")) == ["study", "held-out"]
    assert workloads.chosen("tensor-cores") == {"tensor-cores": workloads.TENSOR_CORES}
    assert workloads.chosen("held-out") == {"held-out": workloads.HELD_OUT}
    with pytest.raises(ValueError, match="unknown workload set 'train'"):
        workloads.chosen("train")


def test_a_workload_given_by_name_keeps_the_model_its_set_names():
    qkv = next(e for e in workloads.HELD_OUT if e.workload == "mm/N2048K768M2304PNT_f16")
    assert workloads.entry("mm/N2048K768M2304PNT_f16") == qkv
    assert workloads.entry("mm/N512K1024M1024PNN") == workloads.STUDY[0]  # spelt otherwise, the same workload
    assert workloads.entry("mm/N512K1024M1024PNT_i8").model == "matmul of the OpEvo study, int8"
    assert workloads.entry("mm/N64K64M64") == workloads.Entry("mm/N64K64M64", "given on the command line")
    with pytest.raises(ValueError):
        workloads.entry("mm/N64")
