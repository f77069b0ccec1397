"""benchmarks/gpu_check.sh: its dry mode runs every check on CPU, so the script cannot rot before a GPU is lent."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.sh"


def run_check(*args: str, dry: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_DRY": "1" if dry else "0",
           "PYTHONPATH": str(SCRIPT.parents[1])}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def test_the_dry_gpu_check_prints_one_table_of_every_check() -> None:
    out = run_check(dry=True)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "dry run" in lines[0]
    table = lines[1:]
    for variant in ("naive", "fused", "fused+compile"):
        assert any(line.startswith("a. logprob") and f" {variant}," in line and " ms, peak " in line
                   for line in table), variant
    for batch in (1, 2):
        assert any(line.startswith("b. decode") and f"batch {batch}," in line and "turns/s" in line
                   for line in table), batch
    assert any(line.startswith("c. trainer") and "rollout" in line for line in table)
    assert any(line.startswith("d. sft (tiny)") and "reply loss" in line for line in table)
    assert any(line.startswith("d. grpo (tiny)") and "rollout" in line for line in table)
    assert not any("failed" in line for line in table)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the full check would run")
def test_without_cuda_the_full_check_says_how_to_run_the_dry_one() -> None:
    out = run_check(dry=False)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == ["gpu_check: no CUDA device here; GPU_CHECK_DRY=1 runs the dry check "
                                               "on CPU"]
