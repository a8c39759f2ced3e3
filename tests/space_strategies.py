"""Search spaces and hypothesis strategies of parameters that the search-space tests share."""
from __future__ import annotations

import json

from hypothesis import strategies as st

from searchspace import Choice, Discrete, Factor, Perm

MIXED = {
    "K": {"_type": "factor", "_value": [1024, 3]},
    "X": {"_type": "factor", "_value": [512, 4]},
    "unroll": {"_type": "discrete", "_value": [0, 16, 64, 512]},
    "vec": {"_type": "choice", "_value": [1, 2, 4]},
    "order": {"_type": "perm", "_value": [3]},
}


def reachable(start, neighbours, key) -> set:
    """The keys of everything a breadth-first walk over `neighbours` reaches from `start`."""
    seen, frontier = {key(start)}, [start]
    while frontier:
        for option in neighbours(frontier.pop()):
            if key(option) not in seen:
                seen.add(key(option))
                frontier.append(option)
    return seen


factor_specs = st.tuples(st.integers(1, 3000), st.integers(1, 4))
choice_specs = st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans(), st.none(),
                                  st.lists(st.integers(0, 3), max_size=2)),
                        min_size=1, max_size=6, unique_by=lambda v: json.dumps(v))
discrete_specs = st.lists(st.integers(-1000, 1000), min_size=1, max_size=8, unique=True).map(sorted)


@st.composite
def params(draw):
    kind = draw(st.sampled_from(["factor", "choice", "discrete", "perm"]))
    if kind == "factor":
        return Factor.from_value("p", list(draw(factor_specs)))
    if kind == "choice":
        return Choice.from_value("p", draw(choice_specs))
    if kind == "discrete":
        return Discrete.from_value("p", draw(discrete_specs))
    return Perm.from_value("p", [draw(st.integers(1, 5))])
