"""Models in: MODEL names a PyTorch model (or an ONNX file) and how to make its example inputs.

    path/to/file.py:function   the function returns (module, example_inputs); it gets `batch=` if it takes it
    torchvision:NAME           torchvision.models.get_model(NAME, weights=None), images of 224x224
    timm:NAME                  timm.create_model(NAME, pretrained=False), images of its default size
    transformers:TYPE          a model type (bert, gpt2, ...): AutoConfig.for_model(TYPE)'s defaults with
                               random weights (nothing is downloaded), token ids of length --seq
    file.onnx                  an ONNX graph (experiments/model/onnx_tasks.py)

The module is put in eval mode, moved to the target's device and cast to the dtype (floating inputs
too).  The target resolves as a trial's does (trial.measure.device): llvm runs on the CPU, cuda and
rocm on torch's "cuda" device.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trial.measure import device as trial_device
from trial.target import KINDS, Target, TargetError
from trial.service.client import ServiceError

from .errors import ModelError, missing, out_of_memory, too_large

DTYPES = ("float32", "float16", "bfloat16")
LIBRARIES = ("torchvision", "timm", "transformers")
DEFAULT_SEQ = 128


@dataclass
class Model:
    """A loaded model: `module` and `inputs` on `device` in `dtype` (an ONNX model has `onnx` instead)."""

    name: str
    module: Any  # torch.nn.Module, or None for an ONNX file
    inputs: tuple[Any, ...]
    dtype: str
    target: Target
    onnx: Path | None = None
    batch: int | None = None  # an ONNX graph's symbolic batch dimension (default 1)

    @property
    def device(self) -> torch.device:
        return torch.device("cuda" if self.target.is_gpu else "cpu")


def resolve_target(kind: str) -> Target:
    """The target a trial with `--target kind` uses, checked against what torch sees here."""
    if kind not in KINDS:
        raise ModelError(f"unknown target {kind!r}: expected one of {', '.join(KINDS)}")
    try:
        target = trial_device(kind)
    except (TargetError, ServiceError) as err:
        raise ModelError(f"target {kind}: {err}") from None
    if target.is_gpu and not torch.cuda.is_available():
        raise ModelError(f"the target is a {target.kind} GPU ({target.device_name}) but this torch build sees no "
                         f"GPU (torch {torch.__version__}): install a {target.kind} build of torch")
    return target


def _from_file(spec: str, batch: int | None) -> tuple[Any, tuple[Any, ...]]:
    path, _, function = spec.rpartition(":")
    file = Path(path)
    if not file.is_file():
        raise ModelError(f"model file {path!r} not found (MODEL is path/to/file.py:function)")
    module_spec = importlib.util.spec_from_file_location(f"_opevo_model_{file.stem}", file)
    source = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(source)
    except Exception as err:
        raise ModelError(f"importing {path} failed: {type(err).__name__}: {err}") from err
    build = getattr(source, function, None)
    if not callable(build):
        raise ModelError(f"{path} has no function {function!r}")
    takes_batch = "batch" in inspect.signature(build).parameters
    if batch is not None and not takes_batch:
        raise ModelError(f"{path}:{function} takes no `batch` argument, so --batch cannot be applied")
    made = build(batch=batch) if batch is not None else build()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise ModelError(f"{path}:{function} must return (module, example_inputs), got {type(made).__name__}")
    module, inputs = made
    return module, tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _import(package: str) -> Any:
    try:
        return importlib.import_module(package)
    except ImportError:
        raise missing(package.partition(".")[0]) from None


_IMAGE_MODELS: dict[str, tuple[str, Callable[[Any, str], Any], type[Exception]]] = {
    # library: (module to import, how it makes the model NAME with random weights, its error for a bad NAME)
    "torchvision": ("torchvision.models", lambda lib, name: lib.get_model(name, weights=None), ValueError),
    "timm": ("timm", lambda lib, name: lib.create_model(name, pretrained=False), RuntimeError),
}


def _from_library(library: str, name: str, batch: int, seq: int) -> tuple[Any, tuple[Any, ...]]:
    if library in _IMAGE_MODELS:
        package, make, bad_name = _IMAGE_MODELS[library]
        imported = _import(package)
        try:
            module = make(imported, name)
        except bad_name as err:
            raise ModelError(f"{library} has no model {name!r}: {err}") from None
        size = getattr(module, "default_cfg", {}).get("input_size", (3, 224, 224))  # timm's; torchvision: 224
        return module, (torch.randn(batch, *size),)
    transformers = _import("transformers")
    try:
        config = transformers.AutoConfig.for_model(name)
    except ValueError as err:
        raise ModelError(f"transformers has no model type {name!r} (give a type such as bert or gpt2): {err}") from None
    module = _FirstOutput(transformers.AutoModel.from_config(config))
    return module, (torch.randint(0, config.vocab_size, (batch, seq)),)


class _FirstOutput(torch.nn.Module):
    """A transformers model whose forward returns its first output (the last hidden state) as a tensor."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any) -> Any:
        return self.model(*args, return_dict=False)[0]


def load(spec: str, batch: int | None = None, dtype: str = "float32", target: str = "auto",
         seq: int = DEFAULT_SEQ) -> Model:
    """Load MODEL `spec` on the target's device in `dtype`; ModelError says what is wrong."""
    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if batch is not None and batch < 1:
        raise ModelError(f"--batch must be positive, got {batch}")
    found = resolve_target(target)
    if spec.endswith(".onnx"):
        if not Path(spec).is_file():
            raise ModelError(f"ONNX file {spec!r} not found")
        return Model(spec, None, (), dtype, found, onnx=Path(spec), batch=batch)
    library, colon, name = spec.partition(":")
    if library in LIBRARIES and colon:
        module, inputs = _from_library(library, name, batch or 1, seq)
    elif ":" in spec and spec.rpartition(":")[0].endswith(".py"):
        module, inputs = _from_file(spec, batch)
    else:
        raise ModelError(f"cannot read MODEL {spec!r}: expected path/to/file.py:function, "
                         f"{', '.join(f'{lib}:NAME' for lib in LIBRARIES)} or a .onnx file")
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"{spec} gave a {type(module).__name__}, not a torch.nn.Module")
    cast = getattr(torch, dtype)
    dev = torch.device("cuda" if found.is_gpu else "cpu")
    try:
        module = module.eval().to(device=dev, dtype=cast)
        inputs = tuple(x.to(dev, cast) if x.is_floating_point() else x.to(dev) for x in inputs)
    except RuntimeError as err:  # torch.OutOfMemoryError (torch >= 2.5) is one
        if out_of_memory(err):
            raise too_large(spec, found.device_name, err) from None
        raise
    return Model(spec, module, inputs, dtype, found)
