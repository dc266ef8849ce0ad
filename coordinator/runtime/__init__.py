"""A node's drivers run over one I/O interface (io.py): the real world's here (real_io.py), the simulator's in
txnsim/simulate."""
