"""Small value checks shared by every validation in the package (a leaf module, numpy only).

Tune's search spaces yield numpy scalars, so each check accepts them; bools are never numbers here,
and non-finite numbers are refused because they would silently turn weights into NaN.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np


def is_int(value: Any) -> bool:
    """An integer, Python or numpy; never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """A finite real number, Python or numpy; never a bool."""
    real = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    return real and math.isfinite(value)


def is_bool(value: Any) -> bool:
    """True or False, Python or numpy (not 0/1 or a string such as 'no')."""
    return isinstance(value, (bool, np.bool_))


def is_text_list(value: Any) -> bool:
    """A sequence of str (a str itself is not one)."""
    is_list = isinstance(value, Sequence) and not isinstance(value, str)
    return is_list and all(isinstance(t, str) for t in value)


def is_lr(lr: Any) -> bool:
    """A learning rate > 0, or RLlib's piecewise-linear schedule ``[[0, lr0], [timestep, lr], ...]``
    over sampled env steps (starting at step 0, increasing steps, every lr > 0)."""
    if is_number(lr):
        return lr > 0
    if not isinstance(lr, (list, tuple)) or not lr:
        return False
    pairs_ok = all(
        isinstance(p, (list, tuple)) and len(p) == 2 and is_int(p[0]) and is_number(p[1]) and p[1] > 0
        for p in lr
    )
    return pairs_ok and lr[0][0] == 0 and all(a[0] < b[0] for a, b in itertools.pairwise(lr))
