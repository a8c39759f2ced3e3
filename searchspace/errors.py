"""The one error type of the search-space model."""


class SpaceError(ValueError):
    """A bad search space or a configuration outside it; the message names the parameter at fault."""
