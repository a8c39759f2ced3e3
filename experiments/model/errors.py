"""The one error of whole-model tuning: a model, option or device it cannot take, said plainly."""
from __future__ import annotations


class ModelError(RuntimeError):
    """A model that cannot be loaded, traced, profiled or run here; the message says why and what to do.
    The command line prints it and exits with status 2."""


def missing(package: str, extra: str = "model") -> ModelError:
    """The error for an optional library that is not installed."""
    return ModelError(f"this needs the Python package {package!r}, which is not installed: "
                      f"pip install {package} (or pip install 'opevo-suite[{extra}]')")


def out_of_memory(err: BaseException) -> bool:
    """Whether `err` is torch failing to allocate memory (on a GPU or on the host)."""
    text = str(err)
    return type(err).__name__ == "OutOfMemoryError" or (
        isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text))


def too_large(what: str, device: str, err: BaseException) -> ModelError:
    """The error for a model (or one of its operators) that does not fit on the device."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ModelError(f"{what} does not fit in the memory of {device} ({first[:200]}): try a smaller --batch")
