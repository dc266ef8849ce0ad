"""A SparkSession set up for txnsim: workers run this interpreter, the format is registered.

Spark starts Python workers with `python3` from PATH unless told otherwise, and there the
txnsim packages and pyarrow are missing (SPARK-REFERENCE, setup pitfalls), so both the
environment variable (local mode) and spark.pyspark.python (standalone workers) name
sys.executable before the JVM starts.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from spark import register


def txnsim_session(master: str = "local[2]", app_name: str = "txnsim", **conf: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.pyspark.python", sys.executable)
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
