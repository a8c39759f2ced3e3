"""Benchmarks: scripts that print figures and ratios against references measured in the same run."""
