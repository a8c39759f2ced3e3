"""The benchmark protocol's workload sets, each workload with the model layer it comes from.

STUDY is the study's eight (`benchmarks.handpicked.STUDY`), on which the tuners' settings were chosen;
HELD_OUT are shapes none of those settings saw, so that a protocol result says how the frozen settings
carry over: transformer GEMMs of several widths (BERT-base at batch 16 x sequence 128, whose linear
layers read their weights transposed, PNT; a ResNet-50 classifier head of width 1000), BERT-base's
attention batched matmuls (16 x 12 heads), ResNet-50 convolutions at batch 32 (1x1, 3x3, stride 2, the
7x7 stem) and at batch 1, and the float16 tensor-core variants of the transformer shapes (N, M and K are
multiples of 16 and A is untransposed, as tensor-core specs need; the head's 1000 is not, so it has none).
"""
from __future__ import annotations

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
SETS = {"study": STUDY, "held-out": HELD_OUT}
"""The protocol's sets by name; "all" on the command line is both, study first."""
QUICK = (STUDY[0], HELD_OUT[0])
"""`--quick`: one study and one held-out workload, what one short GPU session fits."""


def chosen(name: str) -> dict[str, tuple[Entry, ...]]:
    """The sets `--set name` stands for ("study", "held-out" or "all"); ValueError for any other name."""
    if name == "all":
        return dict(SETS)
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
