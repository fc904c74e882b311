"""Benchmarks behind ``robot-app bench ...`` (figures in docs/benchmarks.md; never timing assertions in tests)."""
