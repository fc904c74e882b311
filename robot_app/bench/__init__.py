"""Benchmarks behind ``robot-app bench ...`` (figures for the README; never timing assertions in tests)."""
