"""Tasks of an ONNX model: its MatMul, Gemm and Conv nodes read from the graph's inferred shapes.

ONNX's shape inference (strict: a node it cannot see through is an error naming it) gives every
tensor's type and shape; a symbolic batch dimension of a graph input becomes --batch (default 1).
A MatMul or Gemm operand made by a Transpose of its last two dimensions is the Transpose's input read
as a `T` operand (the suite's P<layout>), as are Gemm's transA/transB.  The time of each node is
onnxruntime's own profile of the graph on the target's device (CUDA execution provider on a GPU)
when onnxruntime is installed (a GPU target with an onnxruntime that has no CUDA provider is an error,
not CPU times; graph optimizations off, so that each profiled node is a
node of the graph: fused, a deployment runs faster than this profile says); without it the tunable nodes are weighed by their arithmetic and the
rest are listed without time, and the table says so.  Nodes of a domain other than ONNX's own are
refused: neither shape inference nor the suite knows what they compute.
"""
from __future__ import annotations

import json
import math
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from trial.workload import SpecError, parse_name

from .errors import ModelError, missing
from .load import Model
from .tasks import Task, TaskList, Untunable

RUNS = 5
_SUFFIX = {1: "", 10: "_f16", 16: "_bf16"}  # TensorProto.FLOAT, FLOAT16, BFLOAT16
_TYPE_NAMES = {11: "float64"}
_ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64"}
Shape = tuple[int, tuple[int, ...]]  # element type, dimensions


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise missing("onnx") from None
    return onnx


def _infer(path: Path, batch: int) -> Any:
    onnx = _onnx()
    try:
        model = onnx.load(str(path))
    except Exception as err:  # a file that is not an ONNX protobuf
        raise ModelError(f"cannot read ONNX file {path}: {err}") from None
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise ModelError(f"unsupported ONNX op {node.domain}::{node.op_type} (node {node.name or node.output[0]!r}): "
                             "only operators of ONNX's own domain can be read")
    for i, node in enumerate(model.graph.node):  # names, by which onnxruntime's profile reports nodes
        node.name = node.name or f"{node.op_type}_{i}"
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_value = batch
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as err:  # onnx.shape_inference.InferenceError, or a checker error
        raise ModelError(f"ONNX shape inference failed: {str(err).strip().splitlines()[0][:300]}") from None


def _shapes(model: Any) -> dict[str, Shape]:
    g = model.graph
    out = {t.name: (t.data_type, tuple(t.dims)) for t in g.initializer}
    for v in (*g.input, *g.value_info, *g.output):
        t = v.type.tensor_type
        if all(d.HasField("dim_value") for d in t.shape.dim):
            out[v.name] = (t.elem_type, tuple(d.dim_value for d in t.shape.dim))
    return out


def _transposed(name: str, producers: dict[str, Any], shapes: dict[str, Shape]) -> str | None:
    """The input of a Transpose that swaps only the last two dimensions and makes `name`, else None."""
    node = producers.get(name)
    if node is None or node.op_type != "Transpose" or node.input[0] not in shapes:
        return None
    perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
    rank = len(shapes[node.input[0]][1])
    return node.input[0] if perm == [*range(rank - 2), rank - 1, rank - 2] else None


def _attrs(node: Any) -> dict[str, Any]:
    onnx = _onnx()
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _matmul_key(node: Any, shapes: dict[str, Shape], producers: dict[str, Any]) -> tuple[str, int] | str:
    """(workload, flops) of a MatMul or Gemm node, or why it has none."""
    a, b = node.input[0], node.input[1]
    if a not in shapes or b not in shapes:
        return "shape not inferred"
    (ta, da), (_, db) = shapes[a], shapes[b]
    if ta not in _SUFFIX:
        return f"{_TYPE_NAMES.get(ta, f'element type {ta}')}: no suite element type"
    attrs = _attrs(node) if node.op_type == "Gemm" else {}
    if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
        return "scaled Gemm (alpha or beta not 1)"
    if len(da) < 2 or len(db) < 2:
        return "matrix-vector product"
    la = "T" if attrs.get("transA") or _transposed(a, producers, shapes) else "N"
    lb = "T" if attrs.get("transB") or _transposed(b, producers, shapes) else "N"
    n, k = (da[-1], da[-2]) if attrs.get("transA") else (da[-2], da[-1])
    m = db[-2] if attrs.get("transB") else db[-1]
    batch = tuple(max(x, y) for x, y in zip((1,) * (len(db) - len(da)) + da[:-2], (1,) * (len(da) - len(db)) + db[:-2]))
    if math.prod(db[:-2]) == 1:
        key = f"mm/N{math.prod(batch) * n}K{k}M{m}P{la}{lb}{_SUFFIX[ta]}"
    else:
        key = f"bmm/B{math.prod(batch)}N{n}K{k}M{m}P{la}{lb}{_SUFFIX[ta]}"
    return key, 2 * math.prod(batch) * n * k * m


def _conv_key(node: Any, shapes: dict[str, Shape]) -> tuple[str, int] | str:
    x, w = node.input[0], node.input[1]
    if x not in shapes or w not in shapes:
        return "shape not inferred"
    (tx, dx), (_, dw) = shapes[x], shapes[w]
    a = _attrs(node)
    pads, strides = list(a.get("pads", [0] * 4)), list(a.get("strides", [1, 1]))
    if len(dx) != 4:
        return "not a 2-D convolution"
    if a.get("group", 1) != 1:
        return "grouped or depthwise convolution"
    if tx != 1:
        return "not float32: the suite's NCHW conv2d is float32 (its float16 and bfloat16 ones are NHWC)"
    if any(d != 1 for d in a.get("dilations", [1, 1])) or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return "dilated convolution or auto_pad"
    if dx[2] != dx[3] or dw[2] != dw[3] or len(set(pads)) != 1 or strides[0] != strides[1]:
        return "non-square image, kernel, stride or padding"
    key = f"conv/N{dx[0]}C{dx[1]}HW{dx[2]}F{dw[0]}K{dw[2]}ST{strides[0]}PD{pads[0]}"
    return key, parse_name(key).flops if _valid(key) else 0


def _valid(key: str) -> bool:
    try:
        parse_name(key)
        return True
    except SpecError:
        return False


def _cpu_only(ort: Any, providers: list[str]) -> ModelError:
    return ModelError(f"the target is a GPU but onnxruntime {ort.__version__} here runs on {', '.join(providers)} "
                      "only: install onnxruntime-gpu (with the CUDA libraries it needs) to time the graph on the GPU, "
                      "or give --target llvm")


def _profile(model: Any, gpu: bool) -> dict[str, float] | None:
    """Milliseconds per run of each node, from onnxruntime's profiler; None without onnxruntime.  A GPU
    target needs onnxruntime's CUDA execution provider: without it (a CPU-only onnxruntime) the times would
    be the CPU's, so that is a ModelError."""
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError:
        return None
    if gpu and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise _cpu_only(ort, ort.get_available_providers())
    options = ort.SessionOptions()
    options.enable_profiling = True
    # no fusion or layout rewrites: each profiled node is then one node of the graph as read here
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with tempfile.TemporaryDirectory(prefix="opevo-ort-") as folder:
        options.profile_file_prefix = str(Path(folder) / "ort")
        providers = ["CUDAExecutionProvider"] if gpu else []
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=[*providers, "CPUExecutionProvider"])
        if gpu and "CUDAExecutionProvider" not in session.get_providers():  # it failed to start: CPU fallback
            session.end_profiling()
            raise _cpu_only(ort, session.get_providers())
        feeds, rng = {}, np.random.default_rng(0)
        for i in session.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            kind = _ORT_TYPES.get(i.type, i.type.removeprefix("tensor(").rstrip(")"))
            feeds[i.name] = rng.standard_normal(shape).astype(kind) if kind.startswith("float") else np.zeros(shape, kind)
        session.run(None, feeds)
        for _ in range(RUNS):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    times: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[e["name"].removesuffix("_kernel_time")] += e["dur"] / 1e3 / (RUNS + 1)
    return times


def find(model: Model) -> TaskList:
    """The ONNX graph's tasks and the rest, each with its time (or arithmetic, without onnxruntime)."""
    inferred = _infer(model.onnx, model.batch or 1)
    shapes = _shapes(inferred)
    producers = {out: node for node in inferred.graph.node for out in node.output}
    times = _profile(inferred, model.target.is_gpu)
    tasks: dict[str, list[float]] = defaultdict(list)
    rest: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for node in inferred.graph.node:
        name = node.name
        found = (_matmul_key(node, shapes, producers) if node.op_type in ("MatMul", "Gemm")
                 else _conv_key(node, shapes) if node.op_type == "Conv" else "no suite operator")
        if isinstance(found, tuple) and not _valid(found[0]):
            found = f"no suite spec for this shape ({found[0]})"
        if isinstance(found, tuple) and parse_name(found[0]).element.mma_k and not model.target.is_gpu:
            found = f"{parse_name(found[0]).dtype}: the suite's kernels for it need CUDA tensor cores"
        weight = times.get(name, 0.0) if times is not None else (found[1] / 1e9 if isinstance(found, tuple) else 0.0)
        if isinstance(found, tuple):
            tasks[parse_name(found[0]).key].append(weight)
        else:
            rest[f"onnx.{node.op_type}"].append((found, weight))
    total = sum(sum(v) for v in tasks.values()) + sum(t for calls in rest.values() for _, t in calls) or 1.0
    unit = 1.0 if times is not None else 0.0  # without a profile there are no milliseconds to state
    return TaskList(
        str(model.onnx), model.target.label, model.target.device_name, "from the graph", total * unit,
        tuple(sorted((Task(w, len(ts), sum(ts) * unit, sum(ts) / total) for w, ts in tasks.items()), key=lambda t: -t.share)),
        tuple(sorted((Untunable(op, tuple(dict.fromkeys(r for r, _ in c)), len(c), sum(t for _, t in c) * unit,
                                sum(t for _, t in c) / total) for op, c in rest.items()), key=lambda u: -u.share)),
        timed_by="onnxruntime's profiler" if times is not None else
        "not timed (onnxruntime is not installed): tunable tasks weighed by their arithmetic")

