"""Spark fixtures: one local SparkSession and one real 3-node txnsim cluster per test module.

A module may set ``SPARK_MASTER = "local[2,2]"`` to get task retries (the second number is
maxFailures). Workers must run this virtualenv's Python, or pyarrow and txnsim are missing
there and Spark only reports "Python worker failed to connect back" after a long timeout.
"""
from __future__ import annotations

import itertools
import os
import re
import sys

import pytest

from tests.integration.conftest import admin, cluster  # noqa: F401 (fixtures: one real 3-node cluster per module)

_names = itertools.count()


@pytest.fixture(scope="module")
def spark(request):
    """A SparkSession for this module (start-up takes about 11 s), with the txnsim format registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark import register

    master = getattr(request.module, "SPARK_MASTER", "local[2]")
    session = (SparkSession.builder.master(master)
               .appName(f"txnsim-{request.module.__name__}")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def topic(admin, request):
    """A fresh 2-partition topic for each test."""
    name = f"s{next(_names)}-" + re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name[:40])
    admin.create_topic(name, partitions=2)
    return name
