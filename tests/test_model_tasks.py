"""Tasks out: the tiny model's operators as suite workloads, the ATen calls' plans, tasks.json, bad models."""
import json
import sys

import pytest

import torch

from experiments.model import ops, tasks
from experiments.model.__main__ import main
from experiments.model.errors import ModelError
from experiments.model.load import load
from model_fixtures import TINY, TINY_TASKS, tiny_model
from trial.workload import parse_name

aten = torch.ops.aten


def _kernel(p: ops.Plan) -> torch.Tensor:
    """What the suite's kernel computes from the plan's operands, written from the workload spec alone."""
    wl = parse_name(p.workload)
    a, b = p.operands
    if wl.op == "conv":
        d = wl.dims
        if wl.layout == "NHWC":  # NHWC input, F x K x K x C weights, NHWC output
            y = torch.nn.functional.conv2d(a.permute(0, 3, 1, 2).float(), b.permute(0, 3, 1, 2).float(),
                                           stride=d["ST"], padding=d["PD"])
            return y.to(a.dtype).permute(0, 2, 3, 1).contiguous()
        return torch.nn.functional.conv2d(a, b, stride=d["ST"], padding=d["PD"])
    a = a.transpose(-2, -1) if wl.layout[0] == "T" else a
    b = b.transpose(-2, -1) if wl.layout[1] == "T" else b
    return a @ b


@pytest.mark.parametrize("op, args, workload", [
    (aten.linear.default, (torch.randn(2, 5, 8), torch.randn(6, 8), torch.randn(6)), "mm/N10K8M6PNT"),
    (aten.matmul.default, (torch.randn(8, 4).t(), torch.randn(8, 6)), "mm/N4K8M6PTN"),
    (aten.matmul.default, (torch.randn(2, 3, 4, 5), torch.randn(5, 6)), "mm/N24K5M6PNN"),
    (aten.matmul.default, (torch.randn(2, 3, 4, 5), torch.randn(3, 5, 6)), "bmm/B6N4K5M6PNN"),
    (aten.bmm.default, (torch.randn(3, 4, 5), torch.randn(3, 6, 5).transpose(1, 2)), "bmm/B3N4K5M6PNT"),
    (aten.matmul.default, (torch.randn(4, 10)[:, ::2], torch.randn(5, 6)), "mm/N4K5M6PNN"),  # strided: copied
    (aten.addmm.default, (torch.randn(6), torch.randn(4, 5), torch.randn(5, 6)), "mm/N4K5M6PNN"),
    (aten.conv2d.default, (torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3), torch.randn(4), [2, 2], [1, 1]),
     "conv/N2C3HW9F4K3ST2PD1"),
    (aten.matmul.default, (torch.randn(32, 16, dtype=torch.float16), torch.randn(16, 48, dtype=torch.float16)),
     "mm/N32K16M48PNN_f16"),
    (aten.conv2d.default, (torch.randn(2, 8, 9, 9, dtype=torch.float16).to(memory_format=torch.channels_last),
                           torch.randn(16, 8, 3, 3, dtype=torch.float16).to(memory_format=torch.channels_last),
                           torch.randn(16, dtype=torch.float16), [2, 2], [1, 1]), "conv/N2C8HW9F16K3ST2PD1_f16"),
    (aten.conv2d.default, (torch.randn(1, 16, 6, 6, dtype=torch.bfloat16), torch.randn(8, 16, 1, 1, dtype=torch.bfloat16)),
     "conv/N1C16HW6F8K1ST1PD0_bf16"),  # NCHW-contiguous: copied to NHWC
])
def test_plan_names_the_workload_and_rebuilds_the_result(op, args, workload):
    p = ops.plan(op, args, {})
    assert isinstance(p, ops.Plan) and p.workload == workload
    assert all(t.is_contiguous() for t in p.operands)
    want = op(*args)  # torch's own rounding to a 16-bit type may differ from the kernel's by one unit
    rtol = max(1e-3, 2 * torch.finfo(want.dtype).eps)
    torch.testing.assert_close(p.finish(_kernel(p)), want, rtol=rtol, atol=1e-3)


@pytest.mark.parametrize("op, args, reason", [
    (aten.conv2d.default, (torch.randn(1, 4, 8, 8), torch.randn(4, 1, 3, 3), None, 1, 1, 1, 4), "grouped"),
    (aten.conv2d.default, (torch.randn(1, 3, 8, 6), torch.randn(4, 3, 3, 3)), "non-square"),
    (aten.conv2d.default, (torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3), None, 1, 2, 2), "dilated"),
    (aten.matmul.default, (torch.randn(4, 5, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)),
     "float64: no suite element type"),
    (aten.matmul.default, (torch.randn(4, 5, dtype=torch.bfloat16), torch.randn(5, 6, dtype=torch.bfloat16)),
     "multiple of 16"),
    (aten.matmul.default, (torch.randn(4, 5), torch.randn(5)), "matrix-vector"),
    (aten.matmul.default, (torch.randn(4, 5, dtype=torch.float16), torch.randn(5, 6, dtype=torch.float16)),
     "multiple of 16"),
    (aten.softmax.int, (torch.randn(4, 5), -1), "no suite operator"),
    (aten.conv2d.default, (torch.randn(1, 3, 8, 8, dtype=torch.float16), torch.randn(8, 3, 3, 3, dtype=torch.float16)),
     "C=3 is not a multiple of 8"),
    (aten.conv2d.default, (torch.randn(1, 8, 8, 8, dtype=torch.float64), torch.randn(8, 8, 3, 3, dtype=torch.float64)),
     "float64 convolution: no suite element type"),
])
def test_plan_says_why_a_call_is_not_tunable(op, args, reason):
    p = ops.plan(op, args, {})
    assert isinstance(p, ops.NotTunable) and reason in p.reason


def test_tiny_model_tasks_counts_and_shares():
    found = tasks.find(tiny_model())
    assert {t.workload: t.count for t in found.tasks} == TINY_TASKS
    assert all(t.time_ms > 0 for t in found.tasks)
    rest = {u.op: u for u in found.untunable}
    assert "grouped or depthwise convolution" in rest["aten.conv2d"].reasons and rest["aten.conv2d"].count == 1
    assert {"aten.softmax", "aten.layer_norm", "aten.relu"} <= set(rest)
    total = sum(t.share for t in found.tasks) + sum(u.share for u in found.untunable)
    assert total == pytest.approx(1.0)
    assert found.tunable_share == pytest.approx(sum(t.time_ms for t in found.tasks) / found.total_ms)


def test_tasks_command_prints_the_table_and_writes_tasks_json(tmp_path, capsys):
    assert main(["tasks", TINY, "--target", "llvm", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "mm/N128K32M32PNT" in printed and "grouped or depthwise convolution" in printed
    assert "tunable: 6 tasks" in printed
    data = json.loads((tmp_path / "tasks.json").read_text())
    assert {t["workload"] for t in data["tasks"]} == set(TINY_TASKS)
    assert {"aten.softmax", "aten.conv2d"} <= {u["op"] for u in data["untunable"]}
    assert [t.workload for t in tasks.read(tmp_path / "tasks.json")] == [t["workload"] for t in data["tasks"]]


def test_bfloat16_tasks_are_listed_as_tensor_core_work_off_the_gpu():
    found = tasks.find(load(TINY, dtype="bfloat16", target="llvm"))
    assert found.tasks == ()
    reasons = {r for u in found.untunable for r in u.reasons}
    assert "bfloat16: the suite's kernels for it need CUDA tensor cores" in reasons


UNTRACEABLE = """
import torch

class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.export cannot trace it
            return x * 2
        return x

def build():
    return Branchy(), (torch.randn(4),)
"""
TOO_LARGE = """
import torch

class Huge(torch.nn.Module):
    def forward(self, x):
        return torch.zeros(1 << 21, 1 << 20) + x.sum()  # 8 TiB of float32

def build():
    return Huge(), (torch.randn(4),)
"""


def test_a_model_that_does_not_trace_is_an_error_naming_the_line(tmp_path, capsys):
    (tmp_path / "branchy.py").write_text(UNTRACEABLE)
    assert main(["tasks", f"{tmp_path / 'branchy.py'}:build", "--target", "llvm", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "torch.export cannot trace the model" in err and "branchy.py:6" in err


def test_a_model_too_large_for_the_device_is_an_error(tmp_path, capsys):
    (tmp_path / "huge.py").write_text(TOO_LARGE)
    assert main(["tasks", f"{tmp_path / 'huge.py'}:build", "--target", "llvm", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "does not fit in the memory of cpu" in err and "--batch" in err


def test_a_missing_library_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # as if not installed
    with pytest.raises(ModelError, match="^this needs the Python package 'timm'"):
        load("timm:resnet18", target="llvm")


class _Net(torch.nn.Module):
    def __init__(self, default_cfg=None):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        if default_cfg is not None:
            self.default_cfg = default_cfg

    def forward(self, x):
        return self.conv(x)


def _library(monkeypatch, name, attribute, make):
    import types

    fake = types.ModuleType(name)
    setattr(fake, attribute, make)
    monkeypatch.setitem(sys.modules, name, fake)
    if "." in name:
        monkeypatch.setitem(sys.modules, name.partition(".")[0], types.ModuleType(name.partition(".")[0]))


def test_image_models_of_torchvision_and_timm(monkeypatch):
    """Each library's model made with random weights, its images of the library's size; a bad name or a
    missing library said plainly."""
    def get_model(name, weights):
        if name != "net" or weights is not None:
            raise ValueError(f"Unknown model {name}")
        return _Net()

    def create_model(name, pretrained):
        if name != "net" or pretrained:
            raise RuntimeError(f"Unknown model ({name})")
        return _Net({"input_size": (3, 32, 32)})

    _library(monkeypatch, "torchvision.models", "get_model", get_model)
    _library(monkeypatch, "timm", "create_model", create_model)
    vision, timm = load("torchvision:net", batch=2, target="llvm"), load("timm:net", target="llvm")
    assert vision.inputs[0].shape == (2, 3, 224, 224) and timm.inputs[0].shape == (1, 3, 32, 32)
    assert isinstance(vision.module, _Net) and not vision.module.training
    with pytest.raises(ModelError, match=r"timm has no model 'other': Unknown model \(other\)"):
        load("timm:other", target="llvm")
    with pytest.raises(ModelError, match="torchvision has no model 'other': Unknown model other"):
        load("torchvision:other", target="llvm")
    monkeypatch.setitem(sys.modules, "torchvision.models", None)
    with pytest.raises(ModelError, match=r"package 'torchvision', which is not installed: pip install torchvision "):
        load("torchvision:net", target="llvm")


class _Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)

    def forward(self, ids, return_dict=True):
        assert return_dict is False
        return (self.embed(ids), "pooled")


def test_a_transformers_model_returns_its_first_output(monkeypatch):
    import types

    config = types.SimpleNamespace(vocab_size=50)
    auto_config = types.SimpleNamespace(for_model=lambda name: config)
    auto_model = types.SimpleNamespace(from_config=lambda c: _Encoder())
    _library(monkeypatch, "transformers", "AutoConfig", auto_config)
    sys.modules["transformers"].AutoModel = auto_model
    model = load("transformers:bert", batch=3, seq=5, target="llvm")
    assert isinstance(model.module, torch.nn.Module) and model.inputs[0].shape == (3, 5)
    with torch.no_grad():
        out = model.module(*model.inputs)
    assert isinstance(out, torch.Tensor) and out.shape == (3, 5, 8)


@pytest.mark.parametrize("spec, message", [
    ("nowhere.py:build", "not found"),
    (f"{TINY.rpartition(':')[0]}:nothing", "no function 'nothing'"),
    ("resnet50", "cannot read MODEL"),
])
def test_bad_model_names(spec, message):
    with pytest.raises(ModelError, match=message):
        load(spec, target="llvm")
