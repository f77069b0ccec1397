"""ALFWorld games: one task instance (a PDDL problem plus its goal) and the loaders.

A game is what upstream ALFWorld stores as ``json_2.1.1/<split>/<task>/trial_*/game.tw-pddl``
(+ ``traj_data.json``).  :class:`AlfredGame` keeps only what differs between games (the PDDL
problem, the goal sentence and the task parameters); the PDDL domain and the text grammar
are the same for every game and are bundled once in ``data/`` (copied from the alfworld
0.4.2 wheel, MIT licence, see ``data/LICENSE-alfworld.txt``).

Example:
    >>> from agentgym_budget.envs.alfworld.game import load_games
    >>> games = load_games("valid_seen", task_types=["pick_and_place_simple"])
    >>> games[0].task_type
    'pick_and_place_simple'
    >>> sorted(games[0].to_tw_pddl())
    ['grammar', 'pddl_domain', 'pddl_problem', 'solvable', 'walkthrough']
"""

from __future__ import annotations

import json
import lzma
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym_budget._once import load_once

__all__ = [
    "DATA_DIR_ENV",
    "SPLITS",
    "TASK_TYPES",
    "AlfredGame",
    "bundled_manifest",
    "domain_text",
    "grammar_text",
    "load_games",
    "load_upstream_games",
    "resolve_task_types",
]

#: ALFWorld's task types by their upstream ids (``alfred_tw_env.TASK_TYPES``).
TASK_TYPES: dict[int, str] = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}
#: Splits, named as in upstream ``json_2.1.1`` (train / in-distribution / out-of-distribution).
SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
#: Environment variable of upstream's data folder (``$ALFWORLD_DATA/json_2.1.1/<split>``).
DATA_DIR_ENV = "ALFWORLD_DATA"
_GOAL_PLACEHOLDER = "UNKNOWN GOAL"
_DATA_PACKAGE = "agentgym_budget.envs.alfworld"


@dataclass(frozen=True)
class AlfredGame:
    """One ALFWorld task instance.

    Attributes:
        id: unique name within its split (upstream: ``<task dir>/<trial dir>``).
        split: ``"train"``, ``"valid_seen"`` or ``"valid_unseen"``.
        task_type: one of :data:`TASK_TYPES` values.
        goal: the task sentence without the final period, e.g. ``"put a clean apple in fridge"``.
        pddl_problem: the PDDL problem text (upstream ``initial_state.pddl`` with the goal).
        object_target / parent_target / toggle_target: ALFRED ``pddl_params`` as the handcoded
            expert uses them (lower-case class names, e.g. ``"apple"``, ``"fridge"``,
            ``"desklamp"``; ``""`` when unused).
        object_sliced: ALFRED's ``pddl_params["object_sliced"]``: the goal wants the object
            sliced (``slice X with knife N`` first; upstream's task dirs say ``AppleSliced``).
        walkthrough: a winning command sequence when known (the expert's), else ``None``.
        expert_plan_len: how many actions the expert needed to win (the walkthrough's length
            when the generator's check found one), else ``None``; records without it read as
            the walkthrough's length.
    """

    id: str
    split: str
    task_type: str
    goal: str
    pddl_problem: str
    object_target: str
    parent_target: str
    toggle_target: str = ""
    walkthrough: tuple[str, ...] | None = None
    object_sliced: bool = False
    expert_plan_len: int | None = None

    def __post_init__(self) -> None:
        if self.task_type not in TASK_TYPES.values():
            raise ValueError(f"unknown ALFWorld task_type {self.task_type!r}; expected one of {list(TASK_TYPES.values())}")
        if self.expert_plan_len is None and self.walkthrough is not None:
            object.__setattr__(self, "expert_plan_len", len(self.walkthrough))  # older records lack the field

    @property
    def task_params(self) -> dict[str, Any]:
        """The expert's task parameters (``HandCodedAgent.reset``'s ``task_params``)."""
        return {
            "task_type": self.task_type,
            "object_target": self.object_target,
            "parent_target": self.parent_target,
            "toggle_target": self.toggle_target,
            "object_sliced": self.object_sliced,
        }

    def to_tw_pddl(self) -> dict[str, Any]:
        """The upstream ``game.tw-pddl`` dict that TextWorld's ``PddlEnv.load`` reads."""
        return {
            "pddl_domain": domain_text(),
            "grammar": grammar_text(self.goal),
            "pddl_problem": self.pddl_problem,
            "solvable": True,
            "walkthrough": list(self.walkthrough) if self.walkthrough is not None else None,
        }

    def to_record(self) -> dict[str, Any]:
        """A JSON-able dict (one line of a bundled split file)."""
        record = asdict(self)
        record["walkthrough"] = list(self.walkthrough) if self.walkthrough is not None else None
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> AlfredGame:
        walkthrough = record.get("walkthrough")
        return cls(**{**record, "walkthrough": tuple(walkthrough) if walkthrough is not None else None})


# -- bundled domain and grammar -----------------------------------------------------------
def _data_file(*parts: str) -> Any:
    return resources.files(_DATA_PACKAGE).joinpath("data", *parts)


@load_once()
def domain_text() -> str:
    """The ALFWorld PDDL domain (``alfred.pddl`` of the alfworld 0.4.2 wheel)."""
    return _data_file("alfred.pddl").read_text(encoding="utf-8")


@load_once()
def _grammar_template() -> str:
    return _data_file("alfred.twl2").read_text(encoding="utf-8")


def grammar_text(goal: str) -> str:
    """The text grammar (``alfred.twl2``) with its ``UNKNOWN GOAL`` replaced by ``goal``."""
    return _grammar_template().replace(_GOAL_PLACEHOLDER, goal)


# -- loaders -------------------------------------------------------------------------------
def resolve_task_types(task_types: Iterable[int | str] | None) -> tuple[str, ...]:
    """Task-type names from names or upstream ids (1..6); ``None`` means all six."""
    if task_types is None:
        return tuple(TASK_TYPES.values())
    if isinstance(task_types, (str, int)):
        task_types = [task_types]
    names = []
    for task_type in task_types:
        if isinstance(task_type, int) and not isinstance(task_type, bool) and task_type in TASK_TYPES:
            names.append(TASK_TYPES[task_type])
        elif isinstance(task_type, str) and task_type in TASK_TYPES.values():
            names.append(task_type)
        else:
            raise ValueError(
                f"unknown ALFWorld task type {task_type!r}; use ids 1..6 or names {list(TASK_TYPES.values())}"
            )
    if not names:
        raise ValueError("task_types is empty; pass None for all six task types")
    return tuple(dict.fromkeys(names))


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {list(SPLITS)}")


# Locked: verifiers builds hundreds of envs in threads at once, and an unlocked cache let every one
# of them decompress and parse the whole bundle at the same time (a hang of minutes).
@load_once()
def _bundled_split(split: str) -> tuple[AlfredGame, ...]:
    path = _data_file("games", f"{split}.jsonl.xz")
    with path.open("rb") as raw, lzma.open(raw, "rt", encoding="utf-8") as lines:
        return tuple(AlfredGame.from_record({**json.loads(line), "split": split}) for line in lines if line.strip())


def bundled_manifest() -> dict[str, Any]:
    """The bundled games' manifest (version, generator seed, counts, solvability checks)."""
    return json.loads(_data_file("games", "manifest.json").read_text(encoding="utf-8"))


def load_games(
    split: str = "train",
    task_types: Iterable[int | str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    max_plan_len: int | None = None,
    include_sliced: bool = True,
) -> list[AlfredGame]:
    """The games of ``split``, filtered to ``task_types`` (names or ids 1..6; ``None`` = all).

    ``max_plan_len`` keeps only the games whose expert plan (:attr:`AlfredGame.expert_plan_len`)
    is at most that long (games with no known plan length are left out then);
    ``include_sliced=False`` leaves out the sliced-object tasks, as upstream's released game set
    does (its ``collect_game_files`` skips ``Sliced`` task dirs).

    ``data_dir`` is upstream's data folder (the one ``alfworld-download`` fills, holding
    ``json_2.1.1/<split>``) or a ``json_2.1.1`` folder itself; the games are then read with
    :func:`load_upstream_games`.  Without ``data_dir``, the ``ALFWORLD_DATA`` environment
    variable is used when it points at such data; otherwise the bundled generated games are
    used.  (Importing ``alfworld`` sets ``ALFWORLD_DATA`` to ``~/.cache/alfworld`` even when
    nothing was downloaded, so an empty folder there means: bundled games.)
    """
    _check_split(split)
    names = resolve_task_types(task_types)
    _check_max_plan_len(max_plan_len)
    games = _load_split(split, names, data_dir)
    return [
        game for game in games
        if (include_sliced or not game.object_sliced)
        and (max_plan_len is None or (game.expert_plan_len is not None and game.expert_plan_len <= max_plan_len))
    ]


def _check_max_plan_len(max_plan_len: int | None) -> None:
    if max_plan_len is not None and (isinstance(max_plan_len, bool) or not isinstance(max_plan_len, int) or max_plan_len < 1):
        raise ValueError(f"max_plan_len must be None or a positive int (expert actions), got {max_plan_len!r}")


def _load_split(split: str, names: tuple[str, ...], data_dir: str | os.PathLike[str] | None) -> list[AlfredGame]:
    if data_dir is not None:
        split_dir = _upstream_split_dir(Path(data_dir), split)
        if split_dir is None:
            raise FileNotFoundError(
                f"no ALFWorld split {split!r} under {str(data_dir)!r}: data_dir must be upstream's data folder "
                f"(holding json_2.1.1/{split}) or a json_2.1.1 folder (holding {split})"
            )
        return load_upstream_games(split_dir, split=split, task_types=names)
    env_dir = os.environ.get(DATA_DIR_ENV)
    split_dir = _upstream_split_dir(Path(env_dir), split) if env_dir else None
    if split_dir is not None:
        return load_upstream_games(split_dir, split=split, task_types=names)
    return [game for game in _bundled_split(split) if game.task_type in names]


def _upstream_split_dir(root: Path, split: str) -> Path | None:
    for candidate in (root / "json_2.1.1" / split, root / split):
        if candidate.is_dir():
            return candidate
    return None


def load_upstream_games(
    split_dir: str | os.PathLike[str], split: str, task_types: Sequence[str] | None = None
) -> list[AlfredGame]:
    """Games from an upstream split folder (``json_2.1.1/<split>``), filtered like ALFWorld.

    Keeps the games ``AlfredTWEnv.collect_game_files`` keeps: a ``traj_data.json`` whose
    ``task_type`` is wanted, a ``game.tw-pddl`` marked ``solvable``, and no ``movable`` or
    ``Sliced`` in the path.  Games come in sorted path order (upstream uses ``os.walk``
    order, which depends on the file system).

    Raises:
        ValueError: when no game is left; the message counts the trials skipped, by reason.
    """
    split_dir = Path(split_dir)
    if not split_dir.is_dir():
        raise FileNotFoundError(
            f"ALFWorld split folder {str(split_dir)!r} does not exist; data_dir / ${DATA_DIR_ENV} must be "
            f"an upstream json_2.1.1 folder holding {list(SPLITS)}"
        )
    wanted = set(resolve_task_types(task_types))
    games = []
    skipped: dict[str, int] = {}
    for traj_path in sorted(split_dir.rglob("traj_data.json")):
        trial_dir = traj_path.parent
        reason, traj, gamedata = _read_trial(trial_dir, wanted)
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        games.append(_game_from_upstream(trial_dir.relative_to(split_dir).as_posix(), split, traj, gamedata))
    if not games:
        reasons = "; ".join(f"{count} {reason}" for reason, count in sorted(skipped.items())) or "no traj_data.json found"
        raise ValueError(
            f"no ALFWorld games in split {split!r} for task_types={sorted(wanted)} under {str(split_dir)!r}: "
            f"skipped {sum(skipped.values())} trial(s): {reasons}"
        )
    return games


_UNSOLVABLE = ('marked unsolvable ("solvable" null or false in game.tw-pddl: alfworld-generate did not verify '
               "them, and upstream AlfredTWEnv skips them too; run alfworld-generate on them)")


def _read_trial(trial_dir: Path, wanted: set[str]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Why upstream's ``collect_game_files`` would skip this trial ("" = keep it), with its
    ``traj_data.json`` and ``game.tw-pddl``; each file is read only once a check needs it, so the
    (large) game files of skipped paths and unwanted task types are never parsed."""
    if "movable" in str(trial_dir) or "Sliced" in str(trial_dir):
        return "movable-receptacle or sliced task(s) (upstream skips them)", {}, {}
    game_path = trial_dir / "game.tw-pddl"
    if not game_path.is_file():
        return "without game.tw-pddl", {}, {}
    traj = json.loads((trial_dir / "traj_data.json").read_text(encoding="utf-8"))
    if traj["task_type"] not in wanted:
        return "of other task types", traj, {}
    gamedata = json.loads(game_path.read_text(encoding="utf-8"))
    if not gamedata.get("solvable"):
        return _UNSOLVABLE, traj, gamedata
    return "", traj, gamedata


def _game_from_upstream(game_id: str, split: str, traj: dict[str, Any], gamedata: dict[str, Any]) -> AlfredGame:
    params = traj.get("pddl_params", {})
    walkthrough = gamedata.get("walkthrough")
    return AlfredGame(
        id=game_id,
        split=split,
        task_type=traj["task_type"],
        goal=_goal_from_grammar(gamedata["grammar"]),
        pddl_problem=gamedata["pddl_problem"],
        object_target=str(params.get("object_target") or "").lower(),
        parent_target=str(params.get("parent_target") or "").lower(),
        toggle_target=str(params.get("toggle_target") or "").lower(),
        walkthrough=tuple(walkthrough) if walkthrough else None,
        object_sliced=bool(params.get("object_sliced")),
    )


def _goal_from_grammar(grammar: str) -> str:
    """The goal sentence upstream baked into a game's grammar (``Your task is to: <goal>.``)."""
    marker = "Your task is to: "
    start = grammar.index(marker) + len(marker)
    end = grammar.index('"', start)
    return grammar[start:end].rstrip(".").replace('\\"', '"')
