"""The benchmark protocol's workload sets, each workload with the model layer it comes from.

STUDY is the study's eight (`benchmarks.handpicked.STUDY`), on which the tuners' settings were chosen;
HELD_OUT are shapes none of those settings saw, so that a protocol result says how the frozen settings
carry over: transformer GEMMs of several widths (BERT-base at batch 16 x sequence 128, whose linear
layers read their weights transposed, PNT; a ResNet-50 classifier head of width 1000), BERT-base's
attention batched matmuls (16 x 12 heads), ResNet-50 convolutions at batch 32 (1x1, 3x3, stride 2, the
7x7 stem) and at batch 1, and the float16 tensor-core variants of the transformer shapes (N, M and K are
multiples of 16 and A is untransposed, as tensor-core specs need; the head's 1000 is not, so it has none).
TENSOR_CORES holds each tensor-core type on the workloads models run it on, the study's and held-out ones.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from trial.workload import parse_name

from .handpicked import STUDY as STUDY_NAMES

_STUDY_MODELS = {
    "mm": "matmul of the OpEvo study",
    "bmm": "batched matmul of the OpEvo study",
    "conv/N512C3HW227F64K11ST4PD0": "AlexNet conv1, batch 512 (the OpEvo study)",
    "conv/N512C64HW27F192K5ST1PD2": "AlexNet conv2, batch 512 (the OpEvo study)",
}


@dataclass(frozen=True)
class Entry:
    """One workload of a set (an op/spec name, `trial.workload.parse_name` reads it) and its origin."""

    workload: str
    model: str


STUDY = tuple(Entry(name, _STUDY_MODELS.get(name) or _STUDY_MODELS[name.split("/")[0]]) for name in STUDY_NAMES)

_BERT = "BERT-base, batch 16 x seq 128"
_TRANSFORMER = (
    ("mm/N2048K768M2304PNT", f"{_BERT}: fused QKV projection"),
    ("mm/N2048K768M768PNT", f"{_BERT}: attention output projection"),
    ("mm/N2048K768M3072PNT", f"{_BERT}: FFN up"),
    ("mm/N2048K3072M768PNT", f"{_BERT}: FFN down"),
    ("bmm/B192N128K64M128PNT", f"{_BERT}: attention scores Q K^T (12 heads)"),
    ("bmm/B192N128K128M64PNN", f"{_BERT}: attention probabilities x V (12 heads)"),
)
HELD_OUT = (
    *(Entry(name, model) for name, model in _TRANSFORMER),
    Entry("mm/N32K2048M1000PNT", "ResNet-50, batch 32: classifier head (width 1000)"),
    Entry("conv/N32C3HW224F64K7ST2PD3", "ResNet-50, batch 32: 7x7 stem, stride 2"),
    Entry("conv/N32C64HW56F64K1ST1PD0", "ResNet-50, batch 32: layer1 1x1 reduce"),
    Entry("conv/N32C64HW56F256K1ST1PD0", "ResNet-50, batch 32: layer1 1x1 expand"),
    Entry("conv/N32C64HW56F64K3ST1PD1", "ResNet-50, batch 32: layer1 3x3"),
    Entry("conv/N32C128HW56F128K3ST2PD1", "ResNet-50, batch 32: layer2 3x3, stride 2"),
    Entry("conv/N32C256HW56F512K1ST2PD0", "ResNet-50, batch 32: layer2 1x1 downsample, stride 2"),
    Entry("conv/N32C256HW14F256K3ST1PD1", "ResNet-50, batch 32: layer3 3x3"),
    Entry("conv/N1C64HW56F64K3ST1PD1", "ResNet-50, batch 1: layer1 3x3"),
    Entry("conv/N1C512HW7F512K3ST1PD1", "ResNet-50, batch 1: layer4 3x3"),
    *(Entry(f"{name}_f16", f"{model}, float16") for name, model in _TRANSFORMER),
)
_TYPES = {"f16": "float16", "bf16": "bfloat16", "tf32": "TF32", "i8": "int8", "e4m3": "float8 e4m3"}
_RESNET50 = "ResNet-50, batch 32"
# eleven of its 3x3 and 1x1 shapes: layer1's four, layer2's four, layer3's 3x3, layer4's 3x3 and 1x1 expand
_RESNET50_LAYERS = (
    ("conv/N32C64HW56F64K1ST1PD0", "layer1 1x1 reduce"),
    ("conv/N32C64HW56F64K3ST1PD1", "layer1 3x3"),
    ("conv/N32C64HW56F256K1ST1PD0", "layer1 1x1 expand"),
    ("conv/N32C256HW56F64K1ST1PD0", "layer1 1x1 reduce of blocks 2-3"),
    ("conv/N32C128HW56F128K3ST2PD1", "layer2 3x3, stride 2"),
    ("conv/N32C256HW56F512K1ST2PD0", "layer2 1x1 downsample, stride 2"),
    ("conv/N32C128HW28F128K3ST1PD1", "layer2 3x3"),
    ("conv/N32C512HW28F128K1ST1PD0", "layer2 1x1 reduce"),
    ("conv/N32C256HW14F256K3ST1PD1", "layer3 3x3"),
    ("conv/N32C512HW7F512K3ST1PD1", "layer4 3x3"),
    ("conv/N32C512HW7F2048K1ST1PD0", "layer4 1x1 expand"),
)


def _typed(entries: tuple[Entry, ...], suffix: str, layout: str = "") -> tuple[Entry, ...]:
    """`entries` in the tensor-core type of `suffix`, with `layout` (e.g. PNT, B K-major) where given."""
    return tuple(Entry(f"{re.sub('P[NT]{2}$', '', e.workload) + layout if layout else e.workload}_{suffix}",
                       f"{e.model}, {_TYPES[suffix]}") for e in entries)


_STUDY_GEMMS = tuple(e for e in STUDY if e.workload.startswith(("mm/", "bmm/")))
_STUDY_MM = tuple(e for e in _STUDY_GEMMS if e.workload.startswith("mm/"))
_BERT_LINEAR = tuple(Entry(name, model) for name, model in _TRANSFORMER if name.startswith("mm/"))
_RESNET50_CONVS = tuple(Entry(name, f"{_RESNET50}: {layer}") for name, layer in _RESNET50_LAYERS)
TENSOR_CORES = (
    *_typed(_STUDY_GEMMS, "f16"), *_typed(_STUDY_GEMMS, "bf16"),
    *_typed(_BERT_LINEAR, "f16"), *_typed(_BERT_LINEAR, "bf16"),
    *_typed(_STUDY_MM, "tf32", "PNT"), *_typed(tuple(e for e in _STUDY_GEMMS if e.workload.endswith("PNT")), "tf32"),
    *_typed(_RESNET50_CONVS[1:3], "tf32"), *_typed(_RESNET50_CONVS, "f16"),
    *_typed(_STUDY_MM, "i8", "PNT"), *_typed(_STUDY_MM, "e4m3", "PNT"),
)
"""The tensor-core types where models run them, each on its template's fastest layout: the study's matmuls
and batched matmuls and BERT-base's four projections in float16 and bfloat16; TF32 (float32 in and out,
as PyTorch's `allow_tf32` runs it) on the study's matmuls with B K-major, its NT batched matmul and two of
ResNet-50's layers; ResNet-50's eleven layers in float16 (NHWC, as `channels_last` runs them); the study's
matmuls in int8 and float8 e4m3 with B K-major, the layout of the vendor's fast 8-bit paths."""
SETS = {"study": STUDY, "held-out": HELD_OUT, "tensor-cores": TENSOR_CORES}
"""The protocol's sets by name."""
ALL = ("study", "held-out")
"""What "all" on the command line stands for, study first: the tuners' settings, chosen on the study's
workloads, carried over to held-out ones.  The tensor-core set is run by its name."""
QUICK = {name: entries[0] for name, entries in SETS.items()}
"""`--quick`: each set's first workload, what one short GPU session fits."""


def chosen(name: str) -> dict[str, tuple[Entry, ...]]:
    """The sets `--set name` stands for (a set's name or "all"); ValueError for any other name."""
    if name == "all":
        return {name: SETS[name] for name in ALL}
    if name not in SETS:
        raise ValueError(f"unknown workload set {name!r}: expected one of {', '.join([*SETS, 'all'])}")
    return {name: SETS[name]}


def entry(name: str) -> Entry:
    """The workload `name` (an op/spec, however spelt) as its set lists it, with the model layer it comes from,
    so that a run asked for by name (--workloads) is recorded as the set's; one of no set is "given on the
    command line".  ValueError for a bad spec."""
    wl = parse_name(name)
    listed = (e for entries in SETS.values() for e in entries if parse_name(e.workload).key == wl.key)
    return next(listed, Entry(wl.name, "given on the command line"))
