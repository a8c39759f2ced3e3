"""Small models written in the repository, so the CPU path runs without downloading anything."""
