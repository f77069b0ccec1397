"""Development tooling, outside the runtime package (not in the wheel).

* :mod:`tools.alfworld.generate` — make, check and apply the bundled ALFWorld game files;
* :mod:`tools.alfworld.differential` — the fast engine against the real one, step by step;
* :mod:`tools.alfworld.fuzz` — random small games for the differential tests;
* :mod:`tools.textworld.bundle` — rebuild the bundled TextWorld game archives;
* :mod:`tools.llama_server` — the tiny model as GGUF behind llama.cpp's OpenAI-compatible server,
  for the served-model tests and benchmarks.

Run from the repository root, e.g. ``python -m tools.alfworld.generate --help``.
"""
