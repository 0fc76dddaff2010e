"""Benchmarks of gtbarrier: commands that print tables with ratios (never timed tests)."""
