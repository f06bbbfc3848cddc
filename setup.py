"""For `python setup.py build_ext --inplace` (what `make` runs to build the compiled
core next to the sources); everything else is configured in pyproject.toml."""

from setuptools import setup

setup()
