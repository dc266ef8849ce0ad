"""Builds the three per-record walks with mypyc (it ships with mypy) when a C compiler is at hand.

partitions/framing.py is a produce's only Python work per record on the node; proto/record_decoding.py
is every reader's (consumers, the nodes' own readers of their logs); proto/record_encoding.py is the
producer's, once per send(). Compiled they run several times faster, from the same source. The build is
optional: without a compiler the modules run interpreted and give the same answers, only slower
(partitions.validation.FRAMING_COMPILED, proto.records.RECORD_DECODING_COMPILED and
RECORD_ENCODING_COMPILED say which one runs).
Everything else about the package is in pyproject.toml.
"""
from setuptools import setup

try:
    from mypyc.build import mypycify
except ImportError:  # pragma: no cover - mypy is in build-system.requires
    extensions = []
else:
    extensions = mypycify(["partitions/framing.py", "proto/record_decoding.py", "proto/record_encoding.py"],
                          opt_level="3", separate=True)  # each beside its source, as partitions/framing*.so
    for extension in extensions:
        extension.optional = True  # a failed compile skips the speed-up, never the install

setup(ext_modules=extensions)
