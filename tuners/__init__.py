"""Tuners of the OpEvo Suite: the shared search-space model (`tuners.space`) and NNI tuners built on it."""
