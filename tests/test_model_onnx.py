"""Tasks of an ONNX model: MatMul, Gemm and Conv nodes read from the inferred shapes, the rest listed."""
import tempfile
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from experiments.model.__main__ import main
from experiments.model.errors import ModelError
from experiments.model.load import load
from experiments.model.onnx_tasks import find


def _weight(name, *shape):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype("float32"), name)


def _graph(path, extra_node=None):
    """x [batch, 3, 8, 8] -> Conv 3x3 -> depthwise Conv -> Relu -> Flatten -> Gemm (W^T) -> MatMul with a
    transposed operand."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="stem", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], name="depthwise", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Relu", ["c2"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["g"], name="fc", transB=1),
        helper.make_node("Transpose", ["w4"], ["w4t"], name="t", perm=[1, 0]),
        helper.make_node("MatMul", ["g", "w4t"], ["y"], name="proj"),
    ]
    if extra_node is not None:
        nodes.append(extra_node)
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_weight("w1", 4, 3, 3, 3), _weight("w2", 4, 1, 3, 3), _weight("w3", 16, 256), _weight("b3", 16),
         _weight("w4", 8, 16)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_onnx_tasks_from_inferred_shapes(tmp_path):
    found = find(load(str(_graph(tmp_path / "small.onnx")), batch=2, target="llvm"))
    assert {t.workload: t.count for t in found.tasks} == {
        "conv/N2C3HW8F4K3ST1PD1": 1,
        "mm/N2K256M16PNT": 1,  # Gemm with transB: W stored [16, 256]
        "mm/N2K16M8PNT": 1,  # MatMul whose B is a Transpose of W [8, 16]: read in place
    }
    rest = {u.op: u for u in found.untunable}
    assert rest["onnx.Conv"].reasons == ("grouped or depthwise convolution",)
    assert {"onnx.Relu", "onnx.Flatten", "onnx.Transpose"} <= set(rest)
    assert sum(t.share for t in found.tasks) + sum(u.share for u in found.untunable) == pytest.approx(1.0)
    assert found.timed_by == "onnxruntime's profiler" and all(t.time_ms > 0 for t in found.tasks)


def test_onnx_tasks_command(tmp_path, capsys):
    path = _graph(tmp_path / "small.onnx")
    assert main(["tasks", str(path), "--target", "llvm", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "conv/N1C3HW8F4K3ST1PD1" in out and "onnx.Relu" in out
    assert (tmp_path / "out" / "tasks.json").exists()


def test_an_unsupported_onnx_op_is_an_error_naming_it(tmp_path):
    odd = helper.make_node("FancyOp", ["y"], ["z"], name="fancy", domain="com.example")
    with pytest.raises(ModelError, match="unsupported ONNX op com.example::FancyOp"):
        find(load(str(_graph(tmp_path / "odd.onnx", odd)), target="llvm"))


def test_the_profile_leaves_no_file_behind(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where TemporaryDirectory and mkdtemp make theirs
    found = find(load(str(_graph(tmp_path / "small.onnx")), target="llvm"))
    assert found.timed_by == "onnxruntime's profiler"
    assert list(scratch.iterdir()) == []


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider'")
@pytest.mark.parametrize("cuda_listed", [False, True])
def test_a_gpu_target_without_onnxruntimes_cuda_provider_is_refused(tmp_path, monkeypatch, cuda_listed):
    """A CPU-only onnxruntime would time the graph on the CPU: for a GPU target that is an error, not times;
    so is a CUDA provider that is listed but does not start (the session falls back to the CPU)."""
    import onnxruntime

    available = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda_listed else ["CPUExecutionProvider"]
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: available)
    monkeypatch.setattr(onnxruntime.InferenceSession, "get_providers", lambda self: ["CPUExecutionProvider"])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    model = load(str(_graph(tmp_path / "small.onnx")), target="llvm")
    model.target = types.SimpleNamespace(is_gpu=True, label="cuda sm_90", device_name="NVIDIA H100 80GB HBM3")
    with pytest.raises(ModelError, match=r"the target is a GPU but onnxruntime \S+ here runs on "
                                         r".*CPUExecutionProvider only: install onnxruntime-gpu"):
        find(model)
    assert list(scratch.iterdir()) == []
