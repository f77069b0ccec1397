"""Rebuild the TextWorld game archives shipped in ``agentgym_budget/envs/textworld/data/``.

Each archive holds the games of ``BUNDLED_SEEDS`` of one challenge at its default settings,
generated with TextWorld ``BUNDLED_TEXTWORLD_VERSION`` (the generator is deterministic per
seed, so a rebuild reproduces the shipped games; a test checks one).

Usage (needs the ``textworld`` extra)::

    python -m tools.textworld.bundle --challenge cooking --out agentgym_budget/envs/textworld/data
"""

from __future__ import annotations

import argparse
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym_budget.envs.textworld.challenges import CHALLENGES, Challenge
from agentgym_budget.envs.textworld.games import BUNDLED_SEEDS, bundle_name, ensure_game


def write_bundle(challenge: Challenge, settings: Mapping[str, Any], out_dir: Path, cache_dir: Path | None = None
                 ) -> Path:
    """Pack the games of ``BUNDLED_SEEDS`` (generating them as needed) into ``out_dir``; the archive's path."""
    target = Path(out_dir) / bundle_name(challenge, settings)
    with tarfile.open(target, "w:gz", compresslevel=9) as archive:
        for seed in BUNDLED_SEEDS:
            path = ensure_game(challenge, settings, seed, cache_dir)
            for member in (path.with_suffix(".json"), path):
                archive.add(member, arcname=member.name)
    return target


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--challenge", choices=sorted(CHALLENGES), required=True)
    parser.add_argument("--out", type=Path, default=Path("agentgym_budget/envs/textworld/data"))
    parser.add_argument("--cache-dir", type=Path, default=None, help="where generated games are kept")
    args = parser.parse_args(argv)
    challenge = CHALLENGES[args.challenge]
    print(write_bundle(challenge, challenge.settings(), args.out, args.cache_dir))


if __name__ == "__main__":
    main()
