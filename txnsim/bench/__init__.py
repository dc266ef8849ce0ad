"""The benchmark suite behind `txnsim bench`: producer, consumer and failover figures, each
measured on a LocalCluster of its own and reported as a ratio against a baseline run in the
same process, interleaved with it, because a small shared machine drifts between runs.
"""
