"""How long ``import agentgym_budget`` takes, next to its floor (``import gymnasium``).

Run: python benchmarks/import_time.py   (target: agentgym_budget < 0.5 s)
Each figure is the median of fresh interpreters; CPU time is printed too, since wall time on
a shared machine includes waiting for a core.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

REPEATS = 7
PROBE = (
    "import time; w = time.perf_counter(); c = time.process_time(); import {module}; "
    "print(time.perf_counter() - w, time.process_time() - c)"
)


def measure(module: str) -> tuple[float, float]:
    runs = []
    for _ in range(REPEATS):
        out = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True, check=True)
        runs.append(tuple(map(float, out.stdout.split())))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> None:
    rows = {module: measure(module) for module in ("gymnasium", "agentgym_budget")}
    print(f"{'module':<18}{'wall s':>10}{'cpu s':>10}")
    for module, (wall, cpu) in rows.items():
        print(f"{module:<18}{wall:>10.3f}{cpu:>10.3f}")
    wall, cpu = rows["agentgym_budget"]
    print(f"agentgym_budget import: {wall:.3f} s wall, {cpu:.3f} s cpu "
          f"({'meets' if wall < 0.5 else 'MISSES'} the < 0.5 s target); "
          f"cost over gymnasium: {wall - rows['gymnasium'][0]:+.3f} s")


if __name__ == "__main__":
    main()
