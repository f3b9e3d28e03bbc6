#!/usr/bin/env bash
# GPU check for a fresh machine with an NVIDIA GPU and this repository checked out. Run from the repo root:
#
#     bash scripts/gpu_check.sh
#
# Phases (each timed and bounded with `timeout`; logs in $OUT/<phase>.log, times in $OUT/times.txt):
#   venv       ${PYTHON:-python3} -m venv .venv-gpu (kept if it exists: a rerun skips what is installed)
#   install    pip install torch==2.13.0 -e '.[test]'   (from the package index: the CUDA build of torch)
#   nvidia-smi the device, driver and CUDA version (then: does torch see the GPU? if not, stop here)
#   te         pip install --no-build-isolation 'transformer-engine[pytorch]', bounded by TE_TIMEOUT; if it
#              times out, fails or does not import, that is reported and everything after runs without it
#              (bridge then builds Megatron-Core's local layer spec on the GPU)
#   gpu-tests  pytest -m gpu tests   (tests/functional/test_training_gpu.py, test_gpu_kernels.py)
#   benchmark  benchmarks/gpu_throughput.py: bridge pretrain() vs the Hugging Face loop, Llama-3.2-1B at
#              seq 4096, bf16; the markdown table goes to $OUT/benchmark.md, all numbers to benchmark.json
# A summary (phases, seconds, status, the TE outcome, the table) ends the output and $OUT/summary.txt.
# Exit status: 0 when every phase passed (a skipped or failed TE install is reported, not a failure).
#
# Budget: about 12 minutes on one H200 when pip's wheels come from a local cache or wheelhouse (the gpu tests
# launch each data-parallel strategy twice, train and resume; PYTEST_ARGS="-k ..." narrows them):
#   venv + install ~90 s (a cold download of torch's CUDA stack, ~5 GB, can take longer)
#   te             <= TE_TIMEOUT = 150 s (a source build of transformer_engine_torch rarely fits: then skipped)
#   gpu-tests      <= TEST_TIMEOUT = 600 s (~13 launches of a tiny model, ~15-20 s each, in-process checks)
#   benchmark      <= BENCH_TIMEOUT = 120 s: two fresh processes, each ~30-40 s of start-up (imports, model
#                  build, first-step kernels) plus 3 warm-up + 8 timed steps of 8 x 4096 tokens (~0.5-1.5 s
#                  per step for a 1.2B model on an H200): the benchmark's default --steps 8 --warmup 3
#
# Without internet: pip itself reads its settings from the environment, e.g.
#     PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheelhouse bash scripts/gpu_check.sh
#     PIP_INDEX_URL=http://mirror.local/simple bash scripts/gpu_check.sh
# The wheelhouse / index must hold torch==2.13.0 (CUDA build) with its nvidia-* dependencies, this
# project's dependencies and the test extra, and for TE the transformer-engine wheels (a prebuilt
# transformer_engine_torch for this torch avoids the source build; pybind11 and ninja for a build), and
# setuptools and wheel for the editable install. Nothing else in this script reaches the network.
#
# In an image that already has a CUDA build of torch (a container, a cloud image), use its interpreter:
#     GPU_CHECK_PYTHON=/usr/bin/python3 bash scripts/gpu_check.sh
#     GPU_CHECK_PYTHON=python3 WHEELS=/path/to/wheelhouse bash scripts/gpu_check.sh   # no package index
# No venv is made and torch is never installed: the interpreter must already import torch with CUDA
# (checked first; nothing is installed otherwise). The phase `install` installs only the project's and the
# test extra's requirements that interpreter lacks (scripts/missing_requirements.py), with pip's
# constraints pinning the installed torch (a requirement that needs another torch fails instead of
# replacing it); from WHEELS (pip --no-index --find-links) when set, else from pip's configured index.
# The project itself is not installed: the tests and the benchmark run from the checkout (PYTHONPATH).
# Transformer Engine is left as the image has it unless SKIP_TE=0.
#
# Settings (environment): GPU_CHECK_PYTHON, WHEELS, PYTHON (python3), OUT (gpu_check_out), TE_TIMEOUT (150), SKIP_TE=1,
# INSTALL_TIMEOUT (420), TEST_TIMEOUT (600), BENCH_TIMEOUT (120), BENCH_ARGS (extra benchmark arguments,
# e.g. "--steps 20"), PYTEST_ARGS (extra pytest arguments), TORCH_PIP_ARGS (extra arguments of the install
# command, e.g. "--extra-index-url https://download.pytorch.org/whl/cu128" for a torch build whose CUDA
# the machine's driver supports: the package index's torch==2.13.0 is built for CUDA 13).
set -euo pipefail

PYTHON=${PYTHON:-python3}
OUT=${OUT:-gpu_check_out}
TE_TIMEOUT=${TE_TIMEOUT:-150}
INSTALL_TIMEOUT=${INSTALL_TIMEOUT:-420}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
    SKIP_TE=${SKIP_TE:-1} # the image's interpreter: no TE install unless asked
else
    SKIP_TE=${SKIP_TE:-0}
fi
BENCH_ARGS=${BENCH_ARGS:-}
TORCH_PIP_ARGS=${TORCH_PIP_ARGS:-}
PYTEST_ARGS=${PYTEST_ARGS:-}
GPU_CHECK_PYTHON=${GPU_CHECK_PYTHON:-}
WHEELS=${WHEELS:-}
VENV=.venv-gpu
VPY=$VENV/bin/python
PIP_SOURCE=()
if [ -n "$WHEELS" ]; then
    PIP_SOURCE=(--no-index --find-links "$WHEELS")
fi
if [ -n "$GPU_CHECK_PYTHON" ]; then
    VPY=$(command -v "$GPU_CHECK_PYTHON" || true)
    if [ -z "$VPY" ]; then
        echo "GPU_CHECK_PYTHON=$GPU_CHECK_PYTHON: no such interpreter" >&2
        exit 2
    fi
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

if [ ! -f pyproject.toml ] || [ ! -f benchmarks/gpu_throughput.py ]; then
    echo "run from the repository root: bash scripts/gpu_check.sh" >&2
    exit 2
fi
mkdir -p "$OUT"
: >"$OUT/times.txt"
FAILED=()
TE_STATUS="not attempted"
START=$SECONDS

phase() { # phase NAME LIMIT_SECONDS COMMAND... : bounded, logged, timed; returns the command's status
    local name=$1 limit=$2 rc
    shift 2
    local t0=$SECONDS
    echo "=== $name (limit ${limit} s): $* ===" | tee -a "$OUT/$name.log"
    set +e
    timeout --kill-after=15 "$limit" "$@" 2>&1 | tee -a "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    set -e
    local took=$((SECONDS - t0)) status=ok
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        status="timed out after ${limit} s"
    elif [ "$rc" -ne 0 ]; then
        status="failed (exit $rc)"
    fi
    printf '%-11s %5d s  %s\n' "$name" "$took" "$status" | tee -a "$OUT/times.txt"
    return "$rc"
}

summary() {
    {
        echo
        echo "=== summary ($((SECONDS - START)) s in all; logs in $OUT/) ==="
        cat "$OUT/times.txt"
        echo "transformer-engine: $TE_STATUS"
        if [ -s "$OUT/benchmark.md" ]; then
            echo
            cat "$OUT/benchmark.md"
        fi
        if [ "${#FAILED[@]}" -gt 0 ]; then
            echo
            echo "failed phases: ${FAILED[*]}"
        fi
    } | tee "$OUT/summary.txt"
}

# ---- venv and the project (or the given interpreter and what it lacks) -------------------------------
if [ -n "$GPU_CHECK_PYTHON" ]; then
    if ! "$VPY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
        found=$("$VPY" -c 'import torch; print("torch", torch.__version__, "(CUDA", torch.version.cuda, "build),",
            torch.cuda.device_count(), "CUDA devices")' 2>&1 | tail -n 1)
        echo "GPU_CHECK_PYTHON=$VPY does not import torch with a CUDA device: $found." \
            "This mode never installs torch: use an interpreter that has a CUDA build, or leave" \
            "GPU_CHECK_PYTHON unset (a venv with torch from the index)." | tee -a "$OUT/env.txt"
        FAILED+=(torch)
        summary
        exit 1
    fi
    "$VPY" scripts/missing_requirements.py --extra test --constraints "$OUT/constraints.txt" >"$OUT/missing.txt"
    if [ -s "$OUT/missing.txt" ]; then
        phase install "$INSTALL_TIMEOUT" "$VPY" -m pip install ${PIP_SOURCE[@]+"${PIP_SOURCE[@]}"} -c "$OUT/constraints.txt" \
            -r "$OUT/missing.txt" || { FAILED+=(install); summary; exit 1; }
    else
        printf '%-11s %5d s  %s\n' install 0 "nothing missing" | tee -a "$OUT/times.txt"
    fi
else
    if [ ! -x "$VPY" ]; then
        phase venv 120 "$PYTHON" -m venv "$VENV" || { FAILED+=(venv); summary; exit 1; }
    fi
    # shellcheck disable=SC2086  # TORCH_PIP_ARGS is a word list
    phase install "$INSTALL_TIMEOUT" "$VPY" -m pip install ${PIP_SOURCE[@]+"${PIP_SOURCE[@]}"} $TORCH_PIP_ARGS torch==2.13.0 \
        -e '.[test]' || { FAILED+=(install); summary; exit 1; }
fi
phase nvidia-smi 30 nvidia-smi || FAILED+=(nvidia-smi)
"$VPY" - <<'EOF' 2>&1 | tee "$OUT/env.txt" || true # the facts are for the log only
import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| CUDA runtime", torch.version.cuda)
print("megatron-core", md.version("megatron-core"), "| transformers", md.version("transformers"))
print("cuda available:", torch.cuda.is_available(), "| devices:", torch.cuda.device_count())
EOF
if ! "$VPY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "torch sees no CUDA device: no driver, a driver older than this torch build's CUDA (see nvidia-smi" \
        "above and TORCH_PIP_ARGS), or a CPU build of torch. Nothing to check." | tee -a "$OUT/env.txt"
    FAILED+=(cuda)
    summary
    exit 1
fi

# ---- Transformer Engine (optional) ------------------------------------------------------------------
te_imports() { "$VPY" -c 'import transformer_engine.pytorch, torch; assert torch.cuda.is_available()' >/dev/null 2>&1; }
if te_imports; then # installed already (by the image, or a previous run): bridge uses it
    TE_STATUS="already installed and imports"
elif [ "$SKIP_TE" = "1" ]; then
    TE_STATUS="skipped (SKIP_TE=1): local layer spec"
else
    # --no-build-isolation builds against the torch installed above; these are its build helpers
    te_t0=$SECONDS
    if phase te "$TE_TIMEOUT" bash -c "'$VPY' -m pip install ${PIP_SOURCE[*]} pybind11 ninja setuptools wheel && \
            '$VPY' -m pip install ${PIP_SOURCE[*]} --no-build-isolation 'transformer-engine[pytorch]'"; then
        if te_imports; then
            TE_STATUS="installed in $((SECONDS - te_t0)) s and imports"
        else
            TE_STATUS="installed but does not import (see $OUT/te.log): removed, running without it"
        fi
    else
        TE_STATUS="not installed: $(tail -n 1 "$OUT/times.txt" | sed 's/^te *[0-9]* s  //') (see $OUT/te.log); running without it"
    fi
    if ! te_imports; then # a half-installed TE would confuse Megatron-Core's own TE detection
        "$VPY" -m pip uninstall -y transformer-engine transformer-engine-torch transformer-engine-cu12 \
            transformer_engine transformer_engine_torch transformer_engine_cu12 >>"$OUT/te.log" 2>&1 || true
    fi
fi
echo "transformer-engine: $TE_STATUS" | tee -a "$OUT/env.txt"
"$VPY" -c 'import importlib.metadata as m; print("transformer-engine version:", m.version("transformer-engine"))' \
    2>/dev/null | tee -a "$OUT/env.txt" || true

# ---- the gpu tests, the benchmark ---------------------------------------------------------------------
# shellcheck disable=SC2086  # PYTEST_ARGS / BENCH_ARGS are word lists
phase gpu-tests "$TEST_TIMEOUT" "$VPY" -m pytest -m gpu -v -rs tests $PYTEST_ARGS || FAILED+=(gpu-tests)
# shellcheck disable=SC2086
phase benchmark "$BENCH_TIMEOUT" "$VPY" benchmarks/gpu_throughput.py --json "$OUT/benchmark.json" $BENCH_ARGS \
    || FAILED+=(benchmark)
# the table and its notes: from the report's heading to the end
sed -n '/^## GPU training throughput/,$p' "$OUT/benchmark.log" >"$OUT/benchmark.md" || true

summary
[ "${#FAILED[@]}" -eq 0 ]
