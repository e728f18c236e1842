"""Modules of the operator benchmark (bench/bench_operator.py)."""
