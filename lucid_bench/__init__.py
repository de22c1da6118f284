"""Benchmarks behind `lucid-hub bench`: generated data, figures and baseline ratios."""
