"""NNI tuners of the OpEvo Suite: search strategies over the shared search-space model (`searchspace`)."""
