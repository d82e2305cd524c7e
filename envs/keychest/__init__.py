"""KeyChest, the CPU-scale memory probe (see :mod:`envs.keychest.env`)."""
