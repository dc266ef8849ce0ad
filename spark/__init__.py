"""Apache Spark connector: the ``txnsim`` Python data source (reads to the LSO, writes exactly once).

    from spark import register
    register(spark_session)
    spark.readStream.format("txnsim").option("bootstrap.servers", bs).option("subscribe", "in").load()

Everything here runs in Spark's Python workers as well as the driver; it imports only client
packages (proto, producer, consumer), never a server package.
"""
from __future__ import annotations

from typing import Any

from spark.source import TxnsimDataSource

__all__ = ["TxnsimDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``txnsim`` format with a SparkSession (idempotent)."""
    spark.dataSource.register(TxnsimDataSource)
