"""The search-space model shared by the suite's tuners and its trial.

`SearchSpace.from_json(space).validate(params)` is how the trial rejects knobs outside the space.
Types: `factor` (ordered factorisations), `choice` (unordered values), `discrete` (ordered numbers),
`perm` (permutations); each is one module here, and `_when` (condition.py) makes a parameter matter only for
some values of a `choice`. `ConstrainedSpace` adds rules on whole configurations
(a device's limits) and hands out only configurations that keep them. `twin_space`/`from_twin` translate a space to and from
NNI's standard types, for NNI's built-in tuners.
"""
from .choice import Choice
from .condition import Condition
from .constrained import ConstrainedSpace, Constraints
from .discrete import Discrete
from .errors import SpaceError
from .factor import Factor
from .param import MAX_ENUMERATION, Parameter
from .perm import Perm
from .space import TYPES, Config, Move, SearchSpace
from .twin import MARKER, TWIN_MAX_CHOICES, from_twin, twin_space

__all__ = ["Choice", "Condition", "Config", "ConstrainedSpace", "Constraints", "Discrete", "Factor", "MAX_ENUMERATION", "Move", "Parameter", "Perm", "SearchSpace",
           "MARKER", "SpaceError", "TWIN_MAX_CHOICES", "TYPES", "from_twin", "twin_space"]
