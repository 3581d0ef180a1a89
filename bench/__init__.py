"""Benchmarks for durable-adk: ``python -m bench.run_all`` runs them all.

Every figure is a ratio measured side by side in one run: the contenders are
interleaved in rounds on the same (shared, noisy) machine and medians are
compared, so drift in machine speed hits every contender alike. Nothing here
asserts an absolute time.
"""
