#!/usr/bin/env bash
# The GPU check (issue 29): log-prob kernels, decode turns/s and five trainer updates on CUDA,
# one table, under 8 minutes.  GPU_CHECK_DRY=1 (or --dry) runs it on CPU at toy shapes.
# See benchmarks/gpu_check.py for what is measured.
set -euo pipefail
cd "$(dirname "$0")/.."
exec timeout 480 "${PYTHON:-python}" benchmarks/gpu_check.py "$@"
