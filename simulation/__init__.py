"""The offline simulator and what it runs: one-device and fleet event loops, workloads, baselines
(Triton's batcher, a fixed window, adaptive cost). Nothing here runs in the server; it
drives scheduler_core's policies through the same Engine as the server's drivers.
"""
