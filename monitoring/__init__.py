"""Monitoring: the Grafana dashboard, and the PromQL checks of the shipped queries (queries.py)."""
