"""The ``txnsim`` DataSource: Spark asks it for readers and writers, one option map for both.

Spark builds this object many times in many processes (driver, planner, executors, the
commit process), so it holds nothing but the options; clients are opened lazily where used.
"""
from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark.reader import BatchReader, StreamReader, kafka_schema
from spark.writer import BatchWriter, StreamWriter


class TxnsimDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "txnsim"

    def schema(self) -> StructType:
        return kafka_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(dict(self.options), schema, overwrite)
