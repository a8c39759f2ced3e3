"""Check an experiment config and its search space in this process, before `nnictl create` starts anything.

Without it a search space that is not JSON ends in a traceback from NNI's config loader, and one the
tuner rejects, or classArgs it rejects, start an experiment whose tuner dies at once (tuners/failure.py).
Here the tuner is built exactly as NNI's dispatcher builds it (`nni.__main__._create_algo`) and given
the space: the tuner's own checks (the suite's search-space model, tuners/classargs.py; NNI's for its
built-ins) decide, and the first problem is raised as a `ConfigError` that names the file.
"""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nni.experiment.config import ExperimentConfig
from nni.experiment.config.utils import unset_base_path
from nni.tools.package_utils.tuner_factory import create_builtin_class_instance, create_customized_class_instance


class ConfigError(ValueError):
    """The experiment cannot start: what is wrong, in the user's terms."""


def _said(err: BaseException) -> str:
    return str(err) if isinstance(err, (ValueError, TypeError, KeyError)) else f"{type(err).__name__}: {err}"


def load_config(path: Path) -> ExperimentConfig:
    """The NNI config at `path`; `ConfigError` if it is missing, not YAML or has fields NNI does not know."""
    if not path.is_file():
        raise ConfigError(f"no experiment config at {path} (write one with python -m experiments.write OP SPEC)")
    try:
        return ExperimentConfig.load(path)
    except Exception as err:  # NNI raises yaml, Type, Value and Attribute errors here
        # NNI 3.0's load sets a module-wide base path and clears it only when it succeeds; left set,
        # every later load in this process fails an assertion (nni/experiment/config/utils/internal.py)
        unset_base_path()
        raise ConfigError(f"{path} is not an NNI experiment config: {_said(err)}") from None


def search_space(config: ExperimentConfig, path: Path) -> tuple[dict[str, Any], str]:
    """The config's search space, decoded, and where it came from; `ConfigError` if missing or not JSON."""
    if config.search_space_file is None:
        if not isinstance(config.search_space, dict):
            raise ConfigError(f"{path} gives no search space (searchSpaceFile: search_space.json)")
        return config.search_space, f"the searchSpace of {path}"
    file = Path(config.search_space_file)
    file = file if file.is_absolute() else path.parent / file
    try:
        text = file.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: searchSpaceFile {config.search_space_file} cannot be read "
                          f"({err.strerror or err}); write it with python -m experiments.write OP SPEC") from None
    try:
        space = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"search space {file} is not JSON: {err.msg} at line {err.lineno}, "
                          f"column {err.colno}") from None
    if not isinstance(space, dict):
        raise ConfigError(f"search space {file} must be a JSON object of knobs, got {type(space).__name__}")
    return space, str(file)


@contextmanager
def _quiet_nni() -> Iterator[None]:
    """NNI's built-in tuners log their seed etc. at INFO to the console when built outside a dispatcher."""
    logger = logging.getLogger("nni")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def check(path: Path) -> ExperimentConfig:
    """Check the config at `path` as `nnictl create` and the tuner will see it; returns it canonical
    (paths absolute).  `ConfigError` with the first problem found."""
    config = load_config(path)
    space, where = search_space(config, path)
    try:
        canonical = config.canonical_copy()
        canonical.validate()
    except Exception as err:
        raise ConfigError(f"{path}: NNI rejects the config: {_said(err)}") from None
    algo = canonical.tuner
    if algo is None:
        raise ConfigError(f"{path} names no tuner")
    with _quiet_nni():
        tuner = _build(path, algo)
        try:
            tuner.update_search_space(space)
        except Exception as err:
            raise ConfigError(f"the tuner {algo.name or algo.class_name} rejects {where}: {_said(err)}") from None
    return canonical


def _build(path: Path, algo: Any) -> Any:
    """The tuner of `algo` (NNI's `_AlgorithmConfig`), built as NNI's dispatcher builds it."""
    args = dict(algo.class_args or {})
    if args.get("warm_start"):  # the records and the device are the experiment's business, not this check's
        args["warm_start"] = False
    try:
        if algo.name:
            tuner = create_builtin_class_instance(algo.name, args, "tuners")
        else:
            tuner = create_customized_class_instance({"codeDirectory": algo.code_directory,
                                                      "className": algo.class_name, "classArgs": args})
    except Exception as err:
        name = algo.name or algo.class_name
        raise ConfigError(f"{path}: the tuner {name} rejects its classArgs: {_said(err)}") from None
    return tuner
