"""The search-space model shared by the suite's tuners and its trial.

`SearchSpace.from_json(space).validate(params)` is how the trial rejects knobs outside the space.
Types: `factor` (ordered factorisations), `choice` (unordered values), `discrete` (ordered numbers),
`perm` (permutations); each is one module here.
"""
from .choice import Choice
from .discrete import Discrete
from .errors import SpaceError
from .factor import Factor
from .param import MAX_ENUMERATION, Parameter
from .perm import Perm
from .space import TYPES, Config, SearchSpace

__all__ = ["Choice", "Config", "Discrete", "Factor", "MAX_ENUMERATION", "Parameter", "Perm", "SearchSpace",
           "SpaceError", "TYPES"]
