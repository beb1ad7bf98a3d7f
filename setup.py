"""A shim for tools that look for setup.py: everything is in pyproject.toml."""

from setuptools import setup

setup()
