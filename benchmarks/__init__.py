"""The benchmark harness: the load generator, segment statistics, report tables, stub CPU
accounting, and every benchmark and check that ``scripts/`` runs (each script there is a
thin entry point to a module here).

A development package: ``make setup`` puts the checkout on the venv's path, so it imports
from there; the wheel does not ship it (the plugin and the operator CLI never import it).
"""
