"""The `txnsim` command: one module per command group, `main.py` wires them."""
