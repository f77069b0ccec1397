"""The benchmarks' name for :mod:`agentgym_budget.provenance` (one implementation, in the package)."""

from agentgym_budget.provenance import git_commit, provenance, write_results

__all__ = ["git_commit", "provenance", "write_results"]
