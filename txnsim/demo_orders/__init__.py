"""`txnsim demo orders`: the articles' order-and-points example on real SQLite databases.

An order service (its own process and SQLite file) binds each points message to its local
transaction with RocketMQ-style half messages; a points service (its own process and file)
deducts points idempotently; the runner breaks the path on purpose and checks both files agree.
"""
