"""`txnsim simulate`: the whole system in one process on simulated time, network, disk and clock.

world (clock, event queue, seeded streams), actors (up, paused, crashed; local clocks),
network (latency, drop, dup, reorder, partitions, request/response), faults (the schedule as
data), injector (applies it), model (what a simulated system implements), trace (lines and
hash, files, timeline), simulation (one run), shrink (ddmin over the schedule), sweep (many
seeds in parallel). Every run is a pure function of its SimConfig.
"""
