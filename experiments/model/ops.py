"""Which suite workload an ATen operator call is, read from its actual tensors, or why it is none.

The same function serves the task list (on the tensors of a profiled run) and the tuned model (on
each call's tensors, so a call whose shapes or strides differ from the traced ones falls back to
torch instead of running a kernel built for other shapes).  A matmul's layout comes from its
operands' strides: an operand whose last two dimensions are stored transposed (a linear's weight,
x @ W^T; `k.transpose(1, 2)`) is read in place as a `T` operand of the suite's `P<layout>`; any
other strided operand is copied to row-major first.  Batched matmuls fold their broadcast batch
dimensions into one (a batch that only one side has becomes rows of a plain matmul).  The bias of
a linear, addmm or conv stays in torch (`Plan.finish`, a kernel of its own after the tuned one, where
the vendor fuses it into its epilogue; `Plan.epilogue` says so).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trial.workload import SpecError, parse_name

SUFFIX = {torch.float32: "", torch.float16: "_f16", torch.bfloat16: "_bf16"}
"""Element types the suite has a spec for (trial/dtypes.py) that models compute in."""


@dataclass(frozen=True)
class Plan:
    """A call the suite can run: its workload, the two operands as the kernel reads them (contiguous)
    and how the kernel's output becomes the operator's result."""

    workload: str
    operands: tuple[torch.Tensor, torch.Tensor]
    finish: Callable[[torch.Tensor], torch.Tensor]
    epilogue: str = ""  # what `finish` computes besides reshaping the output: "bias", or nothing


@dataclass(frozen=True)
class NotTunable:
    """A call the suite cannot run, with the reason (stated per kind, so equal reasons group)."""

    op: str
    reason: str


def op_name(target: Any) -> str:
    """aten.linear for torch.ops.aten.linear.default; a Python function's name otherwise."""
    packet = getattr(target, "overloadpacket", None)
    return str(packet) if packet is not None else getattr(target, "__name__", str(target))


def _stored(t: torch.Tensor) -> tuple[str, torch.Tensor]:
    """`t`'s layout letter and the tensor the kernel reads: N (row-major), T (its transpose is row-major,
    read in place) or N of a row-major copy."""
    if t.is_contiguous():
        return "N", t
    if t.transpose(-2, -1).is_contiguous():
        return "T", t.transpose(-2, -1)
    return "N", t.contiguous()


def _checked(op: str, key: str, check: bool) -> str | NotTunable:
    """`key` if the suite can run it (`check`: parse it; a tuned model's calls skip that, their key being
    compared to a checked one, and a regex would break torch.compile's graph), else why not."""
    if not check:
        return key
    try:
        return parse_name(key).key
    except SpecError as err:
        return NotTunable(op, f"no suite spec for this shape ({str(err).split(': ', 1)[-1]})")


def _with_bias(bias: torch.Tensor | None, shape: Sequence[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    if bias is None:
        return lambda out: out.view(*shape)
    return lambda out: out.view(*shape) + bias


def _epilogue(bias: torch.Tensor | None) -> str:
    return "" if bias is None else "bias"


def matmul(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           check: bool = True) -> Plan | NotTunable:
    """a [..., n, k] @ b [..., k, m] (+ bias), as torch.matmul broadcasts it."""
    if a.dim() < 2 or b.dim() < 2:
        return NotTunable(op, "matrix-vector product")
    if a.dtype not in SUFFIX or b.dtype != a.dtype:
        return NotTunable(op, f"{str(a.dtype).removeprefix('torch.')}: no suite element type")
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    finish = _with_bias(bias, (*batch, n, m))
    if math.prod(b.shape[:-2]) == 1:  # one B for every batch: the batches are rows of one matmul
        la, sa = _stored(a.expand(*batch, n, k).reshape(-1, k))
        lb, sb = _stored(b.reshape(k, m))
        key = f"mm/N{sa.numel() // k}K{k}M{m}P{la}{lb}{SUFFIX[a.dtype]}"
    else:
        size = math.prod(batch)
        la, sa = _stored(a.expand(*batch, n, k).reshape(size, n, k))
        lb, sb = _stored(b.expand(*batch, k, m).reshape(size, k, m))
        key = f"bmm/B{size}N{n}K{k}M{m}P{la}{lb}{SUFFIX[a.dtype]}"
    checked = _checked(op, key, check)
    return checked if isinstance(checked, NotTunable) else Plan(checked, (sa, sb), finish, _epilogue(bias))


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (tuple(v) * 2 if len(v) == 1 else tuple(v))


def conv2d(op: str, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, transposed: bool = False,
           check: bool = True) -> Plan | NotTunable:
    """A convolution as the suite's conv spec has it: square image and kernel, groups 1, dilation 1; float32 NCHW,
    float16 and bfloat16 NHWC (the input and weights read as channels_last lays them, copied where they are
    not; the NHWC output seen as the channels_last NCHW tensor PyTorch returns)."""
    if transposed:
        return NotTunable(op, "transposed convolution")
    if x.dim() != 4:
        return NotTunable(op, "not a batched 2-D convolution")
    if groups != 1:
        return NotTunable(op, "grouped or depthwise convolution")
    if isinstance(padding, str):
        return NotTunable(op, f"padding given as {padding!r}")
    if x.dtype not in SUFFIX or w.dtype != x.dtype:
        return NotTunable(op, f"{str(x.dtype).removeprefix('torch.')} convolution: no suite element type")
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    if dilation != (1, 1):
        return NotTunable(op, "dilated convolution")
    (n, c, h, wd), (f, _, kh, kw) = x.shape, w.shape
    if h != wd or kh != kw or stride[0] != stride[1] or padding[0] != padding[1]:
        return NotTunable(op, "non-square image, kernel, stride or padding")
    key = f"conv/N{n}C{c}HW{h}F{f}K{kh}ST{stride[0]}PD{padding[0]}{SUFFIX[x.dtype]}"
    checked = _checked(op, key, check)
    if isinstance(checked, NotTunable):
        return checked
    nchw = (lambda y: y) if x.dtype == torch.float32 else (lambda y: y.permute(0, 3, 1, 2))
    finish = nchw if bias is None else (lambda y: nchw(y) + bias.view(1, -1, 1, 1))
    inputs = (x, w) if x.dtype == torch.float32 else (x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1))
    return Plan(checked, tuple(t.contiguous() for t in inputs), finish, _epilogue(bias))


def _addmm(op: str, bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta: Any = 1, alpha: Any = 1,
           check: bool = True) -> Plan | NotTunable:
    if beta != 1 or alpha != 1:
        return NotTunable(op, "scaled addmm (alpha or beta not 1)")
    return matmul(op, a, b, bias, check)


def _linear(op: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, check: bool = True) -> Plan | NotTunable:
    return matmul(op, x, w.t(), b, check) if w.dim() == 2 else NotTunable(op, "weight not 2-D")


def _conv2d(op: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, stride: Any = 1,
            padding: Any = 0, dilation: Any = 1, groups: int = 1, check: bool = True) -> Plan | NotTunable:
    return conv2d(op, x, w, b, stride, padding, dilation, groups, check=check)


def _convolution(op: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: Any, padding: Any,
                 dilation: Any, transposed: bool, _output_padding: Any, groups: int, check: bool = True) -> Plan | NotTunable:
    return conv2d(op, x, w, b, stride, padding, dilation, groups, transposed, check)


_PLANNERS: dict[str, Callable[..., Plan | NotTunable]] = {
    "aten.linear": _linear, "aten.matmul": matmul, "aten.mm": matmul, "aten.bmm": matmul, "aten.addmm": _addmm,
    "aten.conv2d": _conv2d, "aten.convolution": _convolution,
}
TUNABLE_OPS = tuple(_PLANNERS)


def planner(target: Any) -> Callable[..., Plan | NotTunable]:
    """The planner of `target` (an ATen overload): plan(target, ...) with the op looked up once, for a
    tuned model's node that plans each of its calls."""
    op = op_name(target)
    found = _PLANNERS.get(op)

    def planned(args: Sequence[Any], kwargs: dict[str, Any], check: bool = True) -> Plan | NotTunable:
        if found is None:
            return NotTunable(op, "no suite operator")
        try:
            return found(op, *args, **kwargs, check=check)
        except TypeError:  # an overload with other arguments than the ones above
            return NotTunable(op, "an overload the suite does not read")

    return planned


def plan(target: Any, args: Sequence[Any], kwargs: dict[str, Any], check: bool = True) -> Plan | NotTunable:
    """The plan of one call of `target` (an ATen overload) on `args`, or why the suite cannot run it."""
    return planner(target)(args, kwargs, check)
