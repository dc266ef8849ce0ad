"""The streaming queries that txnsim ships, runnable as a Spark driver process of their own.

    python -m spark.jobs copy   --bootstrap-servers BS --input in --output out --checkpoint DIR
    python -m spark.jobs income --bootstrap-servers BS --input orders --output income --checkpoint DIR

A separate process so that a demo or a test can SIGKILL the driver and start it again from
its checkpoint. It prints one JSON line per finished micro-batch ({"batch": N, "rows": R}) and
runs until SIGTERM, or with --available-now until the input present at start is processed.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any

#: the orders' value: {"order_id": 7, "amount_cents": 1250, "event_time_ms": 1700000000000}
ORDER_SCHEMA = "order_id long, amount_cents long, event_time_ms long"
#: the generator's closing event: order id -1, amount 0, an hour after the last order. It moves the
#: watermark past every real minute; its own minute stays open (never emitted). It must reach the
#: watermark operator: a filter on order_id would be pushed below withWatermark by Spark's optimizer.
CLOSING_ORDER_ID = -1
WINDOW = "1 minute"
WATERMARK_DELAY = "10 seconds"


def copy_query(spark: Any, args: argparse.Namespace) -> Any:
    """Records of `input` to `output`, value and key unchanged."""
    source = _source(spark, args)
    return source.selectExpr("key", "value")


def income_query(spark: Any, args: argparse.Namespace) -> Any:
    """Income per event-time minute: windows close (append mode) once the watermark passes them."""
    from pyspark.sql import functions as F

    orders = (_source(spark, args)
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o")).select("o.*")
              .withColumn("event_time", F.timestamp_millis("event_time_ms"))
              .withWatermark("event_time", WATERMARK_DELAY))
    per_minute = (orders.groupBy(F.window("event_time", WINDOW))
                  .agg(F.sum("amount_cents").alias("income_cents"), F.count("*").alias("orders")))
    return per_minute.select(
        F.date_format("window.start", "yyyy-MM-dd'T'HH:mm'Z'").alias("key"),
        F.to_json(F.struct(F.unix_millis("window.start").alias("window_start_ms"), "income_cents",
                           "orders")).alias("value"))


QUERIES = {"copy": copy_query, "income": income_query}


def _source(spark: Any, args: argparse.Namespace) -> Any:
    reader = (spark.readStream.format("txnsim").option("bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.input).option("startingOffsets", "earliest"))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    return reader.load()


def start(spark: Any, args: argparse.Namespace) -> Any:
    frame = QUERIES[args.job](spark, args)
    writer = (frame.writeStream.format("txnsim").option("bootstrap.servers", args.bootstrap_servers)
              .option("topic", args.output).option("checkpointLocation", args.checkpoint)
              .outputMode("append").queryName(f"txnsim-{args.job}"))
    if args.kill_driver_after_batch is not None:
        from spark.write_options import KILL_DRIVER_AFTER_BATCH

        writer = writer.option(KILL_DRIVER_AFTER_BATCH, str(args.kill_driver_after_batch))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    return writer.start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spark.jobs", description=__doc__.splitlines()[0])
    parser.add_argument("job", choices=sorted(QUERIES))
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--trigger-ms", type=int, default=500)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=0)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--kill-driver-after-batch", type=int, metavar="BATCH_ID",
                        help="fault injection: SIGKILL this driver right after batch BATCH_ID commits, before Spark's "
                             "commit log records it (the restart replays the batch and writes nothing twice)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from spark.session import txnsim_session
    from spark.writer import DRIVER_PROCESS_GROUP

    os.environ[DRIVER_PROCESS_GROUP] = str(os.getpgrp())  # before the JVM starts, so its children inherit it

    spark = txnsim_session(args.master, f"txnsim-{args.job}")
    query = start(spark, args)
    print(json.dumps({"started": query.id, "run": query.runId}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    reported = -1
    while not stop.is_set() and query.isActive:
        stop.wait(0.2)
        for progress in query.recentProgress:
            if progress["batchId"] > reported:
                reported = progress["batchId"]
                print(json.dumps({"batch": reported, "rows": progress["numInputRows"]}), flush=True)
    failure = query.exception()
    query.stop()
    spark.stop()
    if failure is not None:
        print(json.dumps({"failed": str(failure)[:2000]}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
