"""Differential testing: drive two ALFWorld engines with the same commands and compare every step.

Used by ``tests/test_alfworld_fast_equivalence.py`` (a small sample) and
``benchmarks/alfworld_equivalence.py`` (everything that fits in the time given).  An
episode follows the handcoded expert (an expert trajectory), the expert with random detours,
or a random mix of admissible commands (biased away from ``go to`` so objects get moved,
heated, sliced, ...) and inadmissible strings (other objects' commands, wrong case, extra
words, gibberish, padding whitespace, empty commands).  At every step the observation, the
admissible commands (order included), ``won`` (hence the reward, which the env derives from
``won``) and the expert's next action must be identical.  The expert is ours in upstream mode
(:class:`~agentgym_budget.envs.alfworld.expert.HandCodedExpert`, fed the game's start facts,
reporting what ``ALFWorldEnv`` reports as ``expert_action``); on the reference side it is
upstream's own ``AlfredExpert`` when the reference engine carries it
(:class:`~tools.alfworld.upstream_expert.UpstreamExpertEngine`: ``extra.expert_plan[0]``),
else ours again on the reference's observations.  Once upstream's expert raises (an upstream
run would end there) the expected action is ``"look"`` and the episode stops.

Where the experts part in a state where upstream's pick may follow the order of TextWorld's
fact sets (:meth:`_ExpertPair.upstream_order_matters`), the excuse is checked, not assumed
(:func:`check_hash_order_tie`): upstream's expert replays the episode in a fresh process under
other ``PYTHONHASHSEED`` values, and only when one of them makes upstream choose our action is
the parting a hash-order tie (the episode stops there); otherwise it is a mismatch.

Example:
    >>> import random
    >>> from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    >>> from tools.alfworld.fuzz import fuzz_game
    >>> game = fuzz_game(random.Random(0))
    >>> report = compare_episode(FastAlfredEngine(), FastAlfredEngine(), game, random.Random(0), steps=20, mode="random")
    >>> report.steps, report.mismatches
    (21, [])
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_budget.envs.alfworld.engine import AlfredEngine, EngineStep

__all__ = ["MODES", "TIE_HASH_SEEDS", "EpisodeReport", "Mismatch", "TieCheck", "check_hash_order_tie", "compare_episode",
           "next_command", "with_empty_commands"]

#: The ``PYTHONHASHSEED`` values upstream's expert is replayed under, in order, to check a
#: hash-order tie (until one gives our action): with two candidate objects, each seed orders
#: them either way, so a real tie goes unconfirmed after all 12 with probability about 1/4096.
TIE_HASH_SEEDS = tuple(range(1, 13))
_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mismatch:
    """The first difference found in an episode."""

    game_id: str
    step: int
    command: str | None
    field: str
    expected: Any
    got: Any

    def __str__(self) -> str:
        return (
            f"{self.game_id} step {self.step} after {self.command!r}: {self.field} differs\n"
            f"  reference: {self.expected!r}\n  candidate: {self.got!r}"
        )


@dataclass
class EpisodeReport:
    """Compared steps (the reset counts as one) and mismatches (at most one: the episode stops there)."""

    steps: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    #: set when upstream's AlfredExpert raised (the episode stopped there, as an upstream run would).
    upstream_expert_error: str | None = None
    #: with ``record=True``: the reference's (command, observation, admissible, won) per step.
    transcript: list[tuple[str | None, str, list[str], bool]] = field(default_factory=list)
    #: set when the experts parted where upstream's own choice depends on Python's hash seed
    #: (checked: :func:`check_hash_order_tie`): not a mismatch; the episode stopped there.
    hash_order_tie: Mismatch | None = None
    #: the check of a parting in a hash-ordered state (:func:`check_hash_order_tie`), confirmed or not.
    tie_check: TieCheck | None = None
    #: the experts' seed, and with ``record=True`` the reference expert's action per step.
    expert_seed: int | None = None
    expert_actions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TieCheck:
    """Upstream's expert action at one step, replayed under other hash seeds (:func:`check_hash_order_tie`)."""

    #: ``PYTHONHASHSEED`` -> upstream's action there, for the seeds tried (in order)
    choices: dict[int, str | None]
    #: the action our expert chose there
    ours: str
    #: upstream's action there in the run checked, when it must also come back in a replay
    theirs: str | None = None

    @property
    def confirmed(self) -> bool:
        """Some hash seed made upstream choose our action (and, with ``theirs``, another one the run's
        action): upstream itself picks either way there."""
        return self.ours in self.choices.values() and (self.theirs is None or self.theirs in self.choices.values())

    def __str__(self) -> str:
        picks = ", ".join(f"{seed}: {action!r}" for seed, action in self.choices.items())
        return f"ours {self.ours!r}; upstream by PYTHONHASHSEED {{{picks}}}"


def check_hash_order_tie(game: Any, expert_seed: int, commands: Sequence[str], ours: str, observation: str,
                         hash_seeds: Sequence[int] = TIE_HASH_SEEDS, theirs: str | None = None) -> TieCheck:
    """Replay upstream's expert on ``game`` (seeded ``expert_seed``, then ``commands``) in a fresh
    process per ``PYTHONHASHSEED`` of ``hash_seeds``, until one chooses ``ours`` (and, given
    ``theirs`` — upstream's action in a run made elsewhere — until one chooses that too: the
    replays then show both picks, not only a replay that differs from the run).

    Each replay must end on ``observation`` (the reference's, there): a replay that does not is
    not the same episode, and raises ``RuntimeError``.
    """
    job = json.dumps({"game": game.to_record(), "expert_seed": expert_seed, "commands": list(commands)})
    choices: dict[int, str | None] = {}
    for seed in hash_seeds:
        done = subprocess.run([sys.executable, "-m", "tools.alfworld.upstream_expert"], input=job, text=True,
                              capture_output=True, cwd=_ROOT, env={**os.environ, "PYTHONHASHSEED": str(seed)},
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"upstream's replay under PYTHONHASHSEED={seed} failed:\n{done.stderr[-2000:]}")
        replayed = json.loads(done.stdout.strip().splitlines()[-1])
        if replayed["observation"] != observation:
            raise RuntimeError(f"upstream's replay under PYTHONHASHSEED={seed} is another episode: it ends on "
                               f"{replayed['observation']!r}, not {observation!r}")
        choices[seed] = replayed["expert_action"]
        if TieCheck(choices, ours, theirs).confirmed:
            break
    return TieCheck(choices, ours, theirs)


def _diff(game_id: str, step: int, command: str | None, expected: EngineStep, got: EngineStep) -> Mismatch | None:
    for name in ("observation", "admissible_commands", "won"):
        if getattr(expected, name) != getattr(got, name):
            return Mismatch(game_id, step, command, name, getattr(expected, name), getattr(got, name))
    return None


_INVALID_TEMPLATES = (
    "take {o} from {r}", "move {o} to {r}", "open {r}", "close {r}", "go to {r}", "examine {o}",
    "examine {r}", "use {o}", "heat {o} with {r}", "cool {o} with {r}", "clean {o} with {r}",
    "slice {o} with {o2}", "put {o} in/on {r}", "put {o} in {r}",
)


def _invalid_command(rng: random.Random, admissible: Sequence[str], names: Sequence[str]) -> str:
    """A command that is usually not admissible (it may be by chance: then it is simply played)."""
    kind = rng.randrange(8)
    pick = rng.choice(list(admissible)) if admissible else "look"
    if kind == 0:
        return pick.upper() if rng.random() < 0.5 else pick.capitalize()
    if kind == 1:
        return pick + rng.choice((" now", ".", " please", "s"))
    if kind == 2:
        return rng.choice(("", " ", "dance", "xyzzy", "go", "go to", "take", "inventory please", "help me", "look around"))
    if kind == 3:
        return pick.replace(" ", "  ", 1)
    if kind == 4:  # padding whitespace is stripped by the engines: a valid command
        return rng.choice((" ", "\t", "\n", "  ")) + pick + rng.choice(("", " ", "\n"))
    template = rng.choice(_INVALID_TEMPLATES)
    return template.format(o=rng.choice(names), r=rng.choice(names), o2=rng.choice(names))


def next_command(rng: random.Random, admissible: Sequence[str], names: Sequence[str], invalid_rate: float = 0.2) -> str:
    """One command of the random mix (see the module docstring)."""
    if not admissible or rng.random() < invalid_rate:
        return _invalid_command(rng, admissible, names)
    interacting = [c for c in admissible if not c.startswith(("go to ", "look", "help", "inventory"))]
    if interacting and rng.random() < 0.6:
        return rng.choice(interacting)
    return rng.choice(list(admissible))


def with_empty_commands(rate: float) -> Callable[[random.Random, Sequence[str], Sequence[str]], str]:
    """:func:`next_command`, but an empty command with probability ``rate`` (upstream's expert treats it specially)."""

    def choose(rng: random.Random, admissible: Sequence[str], names: Sequence[str]) -> str:
        return "" if rng.random() < rate else next_command(rng, admissible, names)

    return choose


class _ExpertPair:
    """The reference's expert (upstream's, or ours on its stream) and ours on the candidate's, seeded alike."""

    def __init__(self, game: Any, seed: int, reference: AlfredEngine) -> None:
        from agentgym_budget.envs.alfworld.expert import HandCodedExpert

        self.upstream = reference if hasattr(reference, "seed_expert") else None
        if self.upstream is not None:
            self.upstream.seed_expert(seed)
        count = 1 if self.upstream is not None else 2
        self.experts = [HandCodedExpert.for_game(game, random.Random(seed), expert_type="upstream") for _ in range(count)]

    def upstream_order_matters(self) -> bool:
        """Whether upstream's next action may depend on the order of TextWorld's facts.

        Upstream's pick-two policy takes "the" object already in place as the first matching
        ``inreceptacle`` fact, and TextWorld keeps facts in Python sets (their order follows the
        process's hash seed): with two or more target objects in goal-type receptacles, upstream
        itself picks differently from run to run.  Ours takes them in name, then placement, order.
        """
        expert = self.experts[-1]
        params = expert.task_params
        return params["task_type"] == "pick_two_obj_and_place" and len(
            expert.facts.in_receptacle_of_classes(params["object_target"], params["parent_target"])) >= 2

    @property
    def upstream_raised(self) -> bool:
        return self.upstream is not None and self.upstream.expert_error is not None

    def start(self, observations: tuple[str, str]) -> tuple[str, str]:
        ours = self.experts[-1].start(observations[1])
        return (self.upstream.expert_action if self.upstream else self.experts[0].start(observations[0])), ours

    def advance(self, command: str, steps: tuple[EngineStep, EngineStep]) -> tuple[str, str]:
        ours = self.experts[-1].reported_action(command, steps[1].observation, steps[1].admissible_commands)
        if self.upstream is None:
            return self.experts[0].reported_action(command, steps[0].observation, steps[0].admissible_commands), ours
        # where upstream's AlfredExpert raises, ALFWorldEnv reports "look"
        return self.upstream.expert_action or "look", ours


#: Episode styles: follow the expert, follow it with random detours, or act at random.
MODES = ("expert", "noisy_expert", "random")


def compare_episode(
    reference: AlfredEngine,
    candidate: AlfredEngine,
    game: Any,
    rng: random.Random,
    steps: int = 50,
    mode: str | None = None,
    names: Sequence[str] | None = None,
    choose: Callable[[random.Random, Sequence[str], Sequence[str]], str] = next_command,
    record: bool = False,
    tie_hash_seeds: Sequence[int] = TIE_HASH_SEEDS,
) -> EpisodeReport:
    """Reset both engines on ``game`` and play up to ``steps`` commands; stop at the first mismatch.

    With ``game.task_params`` (an :class:`~agentgym_budget.envs.alfworld.game.AlfredGame`) the
    handcoded expert runs on both observation streams with the same seed, and its action is
    compared too (field ``expert_action``).  ``mode`` (default: drawn from :data:`MODES`)
    decides who acts: the expert (then random commands once won), the expert with random
    detours (30 %), or random commands only.  Where the experts part in a hash-ordered state,
    :func:`check_hash_order_tie` replays upstream's expert under ``tie_hash_seeds``: a tie if one
    of them gives our action, else a mismatch (``()``: every parting is a mismatch).
    """
    report = EpisodeReport()
    game_id = str(getattr(game, "id", "game"))
    mode = mode if mode is not None else rng.choice(MODES)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    expected, got = reference.reset(game), candidate.reset(game)
    report.steps += 1
    if record:
        report.transcript.append((None, expected.observation, list(expected.admissible_commands), expected.won))
    mismatch = _diff(game_id, 0, None, expected, got)
    report.expert_seed = rng.randrange(2**31)
    experts = _ExpertPair(game, report.expert_seed, reference) if hasattr(game, "task_params") else None
    expert_actions = experts.start((expected.observation, got.observation)) if experts else ("look", "look")
    if record:
        report.expert_actions.append(expert_actions[0])
    if mismatch is None and expert_actions[0] != expert_actions[1]:
        mismatch = Mismatch(game_id, 0, None, "expert_action", *expert_actions)
    if mismatch is not None:
        report.mismatches.append(mismatch)
        return report
    if names is None:
        names = _display_names(candidate) or ["apple 1", "fridge 1", "countertop 1"]
    for index in range(steps):
        follow = experts is not None and not expected.won and (
            mode == "expert" or (mode == "noisy_expert" and rng.random() < 0.7)
        )
        command = expert_actions[0] if follow else choose(rng, expected.admissible_commands, names)
        report.commands.append(command)
        expected, got = reference.step(command), candidate.step(command)
        report.steps += 1
        if record:
            report.transcript.append((command, expected.observation, list(expected.admissible_commands), expected.won))
        mismatch = _diff(game_id, index + 1, command, expected, got)
        if mismatch is None and experts is not None:
            expert_actions = experts.advance(command, (expected, got))
            if record:
                report.expert_actions.append(expert_actions[0])
            if expert_actions[0] != expert_actions[1] and experts.upstream is not None and experts.upstream_order_matters():
                report.tie_check = check_hash_order_tie(game, report.expert_seed, report.commands, expert_actions[1],
                                                        expected.observation, tie_hash_seeds)
                if report.tie_check.confirmed:
                    report.hash_order_tie = Mismatch(game_id, index + 1, command, "expert_action", *expert_actions)
                    break  # the experts' states part here; the engines were equal up to this step
            if expert_actions[0] != expert_actions[1]:
                mismatch = Mismatch(game_id, index + 1, command, "expert_action", *expert_actions)
            elif experts.upstream_raised:
                report.upstream_expert_error = experts.upstream.expert_error
                break  # an upstream run ends here
        if mismatch is not None:
            report.mismatches.append(mismatch)
            break
    return report


def _display_names(engine: Any) -> list[str]:
    world = getattr(engine, "world", None)
    if world is None:
        return []
    return sorted(name for name in world.names.values() if not name.endswith(" "))
