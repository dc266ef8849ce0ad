"""Builds partitions/framing.py with mypyc (it ships with mypy) when a C compiler is at hand.

The record framing check is a produce's only Python work per record; compiled it runs about thirty times
faster, from the same source. The build is optional: without a compiler the module runs interpreted and
gives the same answers, only slower (partitions.validation.FRAMING_COMPILED says which one runs).
Everything else about the package is in pyproject.toml.
"""
from setuptools import setup

try:
    from mypyc.build import mypycify
except ImportError:  # pragma: no cover - mypy is in build-system.requires
    extensions = []
else:
    extensions = mypycify(["partitions/framing.py"], opt_level="3")
    for extension in extensions:
        extension.optional = True  # a failed compile skips the speed-up, never the install

setup(ext_modules=extensions)
