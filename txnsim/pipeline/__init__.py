"""`txnsim pipeline`: the Spark exactly-once demo (orders -> income per minute) under crashes."""
