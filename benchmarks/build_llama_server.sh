#!/usr/bin/env bash
# Build llama.cpp's C++ `llama-server` (parallel slots, continuous batching) from the vendored
# llama.cpp of the same llama-cpp-python sdist the `serve-test` extra installs, for
# benchmarks/smollm2_perf.py.  Not part of CI: it takes ~10-15 minutes on 2 cores.
#
#   bash benchmarks/build_llama_server.sh [WORK_DIR]      # prints the binary's path last
set -euo pipefail
work="${1:-${TMPDIR:-/tmp}/llama-server-build}"
python="${PYTHON:-python}"
version="$("$python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || echo 0.3.36)"
mkdir -p "$work"
if [ ! -d "$work/llama_cpp_python-$version" ]; then
  "$python" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" >&2
  tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
fi
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON >&2
cmake --build "$src/build" --target llama-server -j "$(nproc)" >&2
echo "$src/build/bin/llama-server"
