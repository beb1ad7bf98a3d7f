"""Operator tooling around perf_analyzer and a running server (no decision logic here)."""
