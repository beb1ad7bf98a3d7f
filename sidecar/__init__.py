"""Perception sidecar: reads Triton's Prometheus metrics endpoint and NVML, and hands the
decision layer timestamped samples without ever blocking it.

Only this package talks to HTTP and NVML.
"""
