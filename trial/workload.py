"""Workload specs: the shape of one operator instance, parsed from names like `N512K1024M1024`.

Grammar (all numbers are positive integers of at most 9 ASCII digits; PD may be 0):
  mm    N<n>K<k>M<m>[P<layout>][_<type>]       C[n, m] = sum_k A[n, k] * B[k, m]
  bmm   B<b>N<n>K<k>M<m>[P<layout>][_<type>]   the same for each of b batches
  conv  N<n>C<c>HW<hw>F<f>K<k>ST<s>PD<p>[_<type>]  convolution, square image and kernel: NCHW in float32;
                                                 in a tensor-core type (f16, bf16, tf32) NHWC, as PyTorch's
                                                 channels_last, the weights F x K x K x C
<layout> is two letters, N (as above) or T (transposed), for A then B: PNN (default), PNT, PTN, PTT.
<type> is the inputs' element type (trial/dtypes.py): none for float32, f16 (float16, float32
accumulation, float16 output), bf16 (bfloat16, float32 accumulation, bfloat16 output), i8 (int8, int32
accumulation and output), e4m3 (float8 e4m3, float32 accumulation and output) or tf32 (float32 in memory,
TF32 products, float32 accumulation and output; mm or bmm with both operands K-major, PNT, or conv).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .dtypes import BY_SUFFIX, DTYPES, DType, numpy_dtype

OPS = ("mm", "bmm", "conv")

_PATTERNS = {
    "mm": re.compile(r"N(?P<N>[0-9]+)K(?P<K>[0-9]+)M(?P<M>[0-9]+)(?:P(?P<layout>[NT]{2}))?(?:_(?P<dtype>[a-z0-9]+))?"),
    "bmm": re.compile(r"B(?P<B>[0-9]+)N(?P<N>[0-9]+)K(?P<K>[0-9]+)M(?P<M>[0-9]+)(?:P(?P<layout>[NT]{2}))?(?:_(?P<dtype>[a-z0-9]+))?"),
    "conv": re.compile(r"N(?P<N>[0-9]+)C(?P<C>[0-9]+)HW(?P<HW>[0-9]+)F(?P<F>[0-9]+)K(?P<K>[0-9]+)"
                       r"ST(?P<ST>[0-9]+)PD(?P<PD>[0-9]+)(?:_(?P<dtype>[a-z0-9]+))?"),
}
MAX_DIGITS = 9
MAX_SPEC_CHARS = 100
MAX_ELEMENTS = 2**31 - 1
"""Elements of any one tensor: the templates index buffers with 32-bit integers, as TVM does by default."""
MAX_GRID_Z = 65535  # thread blocks along blockIdx.z, which the tensor-core bmm gives the batches
_EXAMPLES = {"mm": "N512K1024M1024PNT", "bmm": "B960N128K128M64PNN", "conv": "N512C3HW227F64K11ST4PD0"}


class SpecError(ValueError):
    """A workload spec that does not name a valid operator instance."""


@dataclass(frozen=True)
class Workload:
    """One operator instance: `op`, its dimensions in spec order, the matmul layout and dtype."""

    op: str
    spec: str  # as the user wrote it: it names the experiment folder
    dims: dict[str, int] = field(hash=False, compare=False)
    layout: str = "NN"
    dtype: str = "float32"

    @property
    def name(self) -> str:
        return f"{self.op}/{self.spec}"

    @property
    def key(self) -> str:
        """The canonical op/spec (layout always written), so equal workloads share records."""
        d = self.dims
        suffix = self.element.suffix
        if self.op == "conv":
            shape = f"N{d['N']}C{d['C']}HW{d['HW']}F{d['F']}K{d['K']}ST{d['ST']}PD{d['PD']}"
            return f"conv/{shape}" + (suffix and f"_{suffix}")
        return f"{self.op}/" + "".join(f"{k}{v}" for k, v in d.items()) + f"P{self.layout}" + (suffix and f"_{suffix}")

    @property
    def element(self) -> DType:
        """The inputs' element type and how it is accumulated."""
        return DTYPES[self.dtype]

    @property
    def out_dtype(self) -> str:
        """The output's element type (the input type for 16-bit floats, else the accumulation type)."""
        return self.element.out

    @property
    def out_itemsize(self) -> int:
        return numpy_dtype(self.out_dtype).itemsize

    @property
    def out_hw(self) -> int:
        """Output height (= width) of a convolution."""
        d = self.dims
        return (d["HW"] + 2 * d["PD"] - d["K"]) // d["ST"] + 1

    @property
    def output_shape(self) -> tuple[int, ...]:
        d = self.dims
        if self.op == "mm":
            return (d["N"], d["M"])
        if self.op == "bmm":
            return (d["B"], d["N"], d["M"])
        if self.layout == "NHWC":
            return (d["N"], self.out_hw, self.out_hw, d["F"])
        return (d["N"], d["F"], self.out_hw, self.out_hw)

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Shapes of the inputs as stored in memory (transposed operands are stored transposed)."""
        d = self.dims
        if self.layout == "NHWC":
            return ((d["N"], d["HW"], d["HW"], d["C"]), (d["F"], d["K"], d["K"], d["C"]))
        if self.op == "conv":
            return ((d["N"], d["C"], d["HW"], d["HW"]), (d["F"], d["C"], d["K"], d["K"]))
        a = (d["K"], d["N"]) if self.layout[0] == "T" else (d["N"], d["K"])
        b = (d["M"], d["K"]) if self.layout[1] == "T" else (d["K"], d["M"])
        if self.op == "bmm":
            return ((d["B"], *a), (d["B"], *b))
        return (a, b)

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the inputs and the output together: what one measurement holds on the device."""
        inputs = sum(math.prod(shape) for shape in self.input_shapes)
        return self.element.itemsize * inputs + self.out_itemsize * math.prod(self.output_shape)

    @property
    def reduction(self) -> int:
        """Products summed into each output element: K, or C*K*K for a convolution."""
        d = self.dims
        return d["C"] * d["K"] ** 2 if self.op == "conv" else d["K"]

    @property
    def flops(self) -> int:
        """Arithmetic operations of one run (a multiply-add counts as two), floating-point or integer."""
        d = self.dims
        if self.op == "conv":
            return 2 * d["N"] * d["F"] * self.out_hw ** 2 * d["C"] * d["K"] ** 2
        return 2 * d.get("B", 1) * d["N"] * d["K"] * d["M"]


def parse(op: str, spec: str) -> Workload:
    """Parse `spec` for operator `op`; raise SpecError that says what is wrong."""
    if op not in OPS:
        raise SpecError(f"unknown op {str(op)[:20]!r}: expected one of {', '.join(OPS)}")
    if not isinstance(spec, str) or len(spec) > MAX_SPEC_CHARS:
        raise SpecError(f"bad {op} spec: expected a string of at most {MAX_SPEC_CHARS} characters like "
                        f"{_EXAMPLES[op]}, got {str(spec)[:40]!r}{'...' if len(str(spec)) > 40 else ''}")
    m = _PATTERNS[op].fullmatch(spec)
    if m is None:
        raise SpecError(f"bad {op} spec {spec!r}: expected the form {_EXAMPLES[op]} "
                        f"(see `python -m trial --help` for the grammar)")
    groups = m.groupdict()
    layout = groups.pop("layout", None) or "NN"
    suffix = groups.pop("dtype", None) or ""
    if suffix not in BY_SUFFIX:
        raise SpecError(f"bad {op} spec {spec!r}: unknown element type _{suffix}; expected one of "
                        f"{', '.join('_' + s for s in BY_SUFFIX if s)} (none for float32)")
    long = [k for k, v in groups.items() if len(v) > MAX_DIGITS]
    if long:
        raise SpecError(f"bad {op} spec {spec!r}: {long[0]} has more than {MAX_DIGITS} digits")
    dims = {k: int(v) for k, v in groups.items()}
    allowed_zero = {"PD"}
    for k, v in dims.items():
        if v <= 0 and k not in allowed_zero:
            raise SpecError(f"bad {op} spec {spec!r}: {k} must be positive, got {v}")
    conv_layout = "NHWC" if suffix else "NCHW"
    wl = Workload(op, spec, dims, layout if op != "conv" else conv_layout, BY_SUFFIX[suffix].name)
    if op == "conv" and suffix:
        _check_typed_conv(wl)
    elif wl.element.mma_k:
        _check_tensor_core(wl)
    if op == "conv":
        if dims["K"] > dims["HW"] + 2 * dims["PD"]:
            raise SpecError(f"bad conv spec {spec!r}: kernel {dims['K']} is larger than the padded "
                            f"image {dims['HW'] + 2 * dims['PD']}, so the output size would be <= 0")
    names = ("the input", "the weights") if op == "conv" else ("A", "B")
    for what, shape in zip((*names, "the output"), (*wl.input_shapes, wl.output_shape)):
        if math.prod(shape) > MAX_ELEMENTS:
            raise SpecError(f"bad {op} spec {spec!r}: {what} would hold {'x'.join(map(str, shape))} = "
                            f"{math.prod(shape):,} elements, more than the {MAX_ELEMENTS:,} a 32-bit index reaches")
    return wl


def _check_tensor_core(wl: Workload) -> None:
    """The shapes the tensor-core template tiles exactly: whole 16x16 output tiles, whole MMA k-steps,
    and, for 8-bit types, A not transposed (TVM has no transposing 8-bit ldmatrix for A).  TF32's kernel is
    the Hopper wgmma one alone: mm or bmm, both operands K-major, whole 64 x 64 tiles and 32-deep K tiles."""
    d, e = wl.dims, wl.element
    if e.input_bits:
        odd = [f"{k}={d[k]} is not a multiple of {n}" for k, n in (("N", 64), ("M", 64), ("K", 32)) if d[k] % n]
        if wl.op not in ("mm", "bmm") or wl.layout != "NT" or odd:
            raise SpecError(f"bad {wl.op} spec {wl.spec!r}: tf32 kernels are mm or bmm with both operands K-major "
                            f"(PNT: A row-major, B column-major, as torch.nn.Linear's weight), N and M multiples "
                            f"of 64 and K of 32" + (f": {', '.join(odd)}" if odd else ""))
        return
    need = {"N": 16, "M": 16, "K": e.mma_k}
    odd = [f"{k}={d[k]} is not a multiple of {n}" for k, n in need.items() if d[k] % n]
    if odd:
        raise SpecError(f"bad {wl.op} spec {wl.spec!r}: {e.name} tensor-core kernels need N and M multiples of 16 "
                        f"and K a multiple of {e.mma_k}: {', '.join(odd)} (pad the operands)")
    if e.itemsize == 1 and wl.layout[0] == "T":
        raise SpecError(f"bad {wl.op} spec {wl.spec!r}: {e.name} tensor-core kernels read A untransposed "
                        f"(PNN or PNT), not P{wl.layout}")
    if d.get("B", 1) > MAX_GRID_Z:
        raise SpecError(f"bad {wl.op} spec {wl.spec!r}: {d['B']} batches exceed the {MAX_GRID_Z} thread blocks "
                        f"a tensor-core bmm can give them")


def _check_typed_conv(wl: Workload) -> None:
    """A convolution in a tensor-core type: a floating-point one, and channels in whole 16-byte vectors (the
    NHWC rows that TMA and vector loads read; cuDNN pads a 3-channel image the same way)."""
    e, d = wl.element, wl.dims
    if e.is_integer or e.itemsize == 1:
        raise SpecError(f"bad conv spec {wl.spec!r}: convolutions take float32 (no suffix), _f16, _bf16 or _tf32, "
                        f"not _{e.suffix}")
    vector = 16 // e.itemsize
    odd = [f"{k}={d[k]} is not a multiple of {vector}" for k in ("C", "F") if d[k] % vector]
    if odd:
        raise SpecError(f"bad conv spec {wl.spec!r}: {e.name} convolutions read and write channels in 16-byte "
                        f"vectors of {vector}: {', '.join(odd)} (pad the channels with zeros)")


def parse_name(name: str) -> Workload:
    """Parse 'op/spec' (e.g. mm/N512K1024M1024), as experiments, records and benchmarks name workloads."""
    op, slash, spec = name.partition("/") if isinstance(name, str) else ("", "", "")
    if not slash:
        raise SpecError(f"expected op/spec, e.g. mm/N512K1024M1024, got {name!r}")
    return parse(op, spec)
