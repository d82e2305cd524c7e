"""How long torch's OpenMP threads spin while they wait: set once, before torch loads.

libgomp (torch's CPU wheels) lets a waiting thread spin ~300,000 times before it sleeps. Alone on the
cores that is free, but beside another busy process (an evaluation beside an SFT build or a learner, a
test beside a training run) each of generation's many small ops waits for a thread the scheduler gave
to the neighbour: HF ``generate`` of the CPU warm starts' model took 3-7x longer beside the WebShop
SFT build than with 3,000 spins, which cost nothing measurable alone
(``benchmarks/openmp_waiting.py``, docs/throughput.md). Ray's worker processes inherit the setting.
"""

from __future__ import annotations

import os

#: Spins before a waiting OpenMP thread sleeps (libgomp's ``GOMP_SPINCOUNT``).
SPIN_COUNT = 3000
#: The variables by which a user chooses how OpenMP waits; any of them set, nothing is changed.
USER_CHOICES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def wait_briefly() -> None:
    """Set ``GOMP_SPINCOUNT`` unless the user chose how OpenMP waits (it, or ``OMP_WAIT_POLICY``).
    Takes effect in processes that load torch afterwards: this one if torch is not yet imported,
    and every child (Ray's workers)."""
    if not any(name in os.environ for name in USER_CHOICES):
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
