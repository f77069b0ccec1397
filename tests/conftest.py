import os
import sys

# Make `tests/` importable as a plain directory of helpers (toy_env) for every test module.
sys.path.insert(0, os.path.dirname(__file__))
