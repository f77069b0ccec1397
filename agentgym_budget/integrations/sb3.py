"""Stable-Baselines3 / sb3-contrib: text envs as ``Discrete`` action, ``Box`` observation envs.

* :class:`DiscreteCommands` — a wrapper turning a text env into ``Discrete(max_actions)``
  over its admissible commands (action ``i`` plays ``info["admissible_commands"][i]``),
  with :meth:`DiscreteCommands.action_masks` (what ``sb3_contrib.MaskablePPO`` calls) and a
  fixed-size ``Box`` observation from :class:`CommandFeatures`.
* :class:`CommandFeatures` — the observation encoder: the task and observation text, one
  feature block per command slot (so the policy can tell what action ``i`` means in this
  state) and, under :class:`~agentgym_budget.wrappers.TurnBudget`, the fraction of the
  budget left.  Text is encoded by :class:`HashingBagOfWords` by default; any
  :class:`TextEncoder` (``dim`` + ``__call__(text) -> array``) plugs in.
* :class:`MaskablePolicy` — a trained ``MaskablePPO`` as an :class:`agentgym_budget.policies.Policy`
  (``act(obs, info) -> str``), for the Pass@(K,T) evaluator.

The wrapper needs only gymnasium and numpy, so any library that understands action masks
can use it; :class:`MaskablePolicy` needs torch (extra ``sb3``).  A masked-out (or
out-of-range) action is still a legal turn: it plays the empty command, which the env
answers in-game (``"Nothing happens."``).

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> from agentgym_budget.integrations.sb3 import DiscreteCommands
    >>> env = DiscreteCommands(gym.make("KeyDoor-Budget-v0", budget=4), max_actions=4)
    >>> env.action_space, env.observation_space.shape
    (Discrete(4), (329,))
    >>> obs, info = env.reset(seed=0, options={"task": "red-blue"})
    >>> env.action_masks().tolist(), info["admissible_commands"][0]
    ([True, True, True, False], 'take key')
    >>> obs, reward, terminated, truncated, info = env.step(0)
    >>> info["command"], float(obs[-1])
    ('take key', 0.75)

Change log:
    * v0.1.0 - Initially added.
"""

from __future__ import annotations

import re
import warnings
import zlib
from typing import Any, Protocol, SupportsFloat, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agentgym_budget._optional import require
from agentgym_budget.wrappers.budget import find_turn_budget

__all__ = ["CommandFeatures", "DiscreteCommands", "HashingBagOfWords", "MaskablePolicy", "TextEncoder"]

#: What a masked-out or out-of-range action plays: not a command, so the env answers it in-game.
MASKED_ACTION_COMMAND = ""
_WORD = re.compile(r"[a-z0-9]+")


@runtime_checkable
class TextEncoder(Protocol):
    """Text -> a float32 vector of length ``dim`` with entries in ``[0, 1]``."""

    dim: int

    def __call__(self, text: str) -> np.ndarray: ...


class HashingBagOfWords:
    """Word n-grams hashed (CRC32, stable across processes) into ``dim`` buckets, L2-normalised.

    >>> encoder = HashingBagOfWords(dim=16)
    >>> vector = encoder("go to fridge 1")
    >>> vector.shape, vector.dtype, round(float((vector ** 2).sum()), 6)
    ((16,), dtype('float32'), 1.0)
    """

    def __init__(self, dim: int = 256, ngrams: tuple[int, ...] = (1, 2)) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if not ngrams or any(n < 1 for n in ngrams):
            raise ValueError(f"ngrams must be a non-empty tuple of sizes >= 1, got {ngrams!r}")
        self.dim = int(dim)
        self.ngrams = tuple(ngrams)

    def __call__(self, text: str) -> np.ndarray:
        words = _WORD.findall(text.lower())
        vector = np.zeros(self.dim, dtype=np.float32)
        for n in self.ngrams:
            for i in range(len(words) - n + 1):
                vector[zlib.crc32(" ".join(words[i : i + n]).encode()) % self.dim] += 1.0
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm > 0 else vector

    def __repr__(self) -> str:
        return f"HashingBagOfWords(dim={self.dim}, ngrams={self.ngrams})"


class CommandFeatures:
    """The fixed-size observation of a text turn: ``[text | command slots | budget left]``.

    Args:
        max_actions: number of command slots (commands beyond it cannot be chosen).
        text_encoder: encodes ``info["task"] + obs`` (default ``HashingBagOfWords(256)``).
        command_encoder: encodes each admissible command into its slot (default
            ``HashingBagOfWords(16)``), followed by two overlap features: the fraction of
            the command's words found in the task and in the observation (what an MLP
            would otherwise have to learn to match); empty slots are zeros.
        budget_scale: when set, one last feature ``min(info["turns_left"] / budget_scale, 1)``.
    """

    def __init__(self, max_actions: int = 32, text_encoder: TextEncoder | None = None,
                 command_encoder: TextEncoder | None = None, budget_scale: int | None = None) -> None:
        if max_actions < 1:
            raise ValueError(f"max_actions must be >= 1, got {max_actions}")
        if budget_scale is not None and budget_scale < 1:
            raise ValueError(f"budget_scale must be >= 1 (the largest budget), got {budget_scale}")
        self.max_actions = int(max_actions)
        self.text_encoder = text_encoder or HashingBagOfWords(256)
        self.command_encoder = command_encoder or HashingBagOfWords(16)
        self.budget_scale = budget_scale
        self.slot_dim = self.command_encoder.dim + 2
        self.dim = self.text_encoder.dim + self.max_actions * self.slot_dim + (budget_scale is not None)
        self._warned_overflow = False

    @property
    def space(self) -> spaces.Box:
        return spaces.Box(0.0, 1.0, shape=(self.dim,), dtype=np.float32)

    def commands(self, info: dict[str, Any]) -> list[str]:
        """The admissible commands that fit in the slots."""
        commands = list(info.get("admissible_commands", ()))
        if len(commands) > self.max_actions and not self._warned_overflow:
            warnings.warn(f"{len(commands)} admissible commands but max_actions={self.max_actions}: "
                          "the commands past the last slot cannot be chosen", stacklevel=3)
            self._warned_overflow = True
        return commands[: self.max_actions]

    def encode(self, obs: str, info: dict[str, Any]) -> np.ndarray:
        task = str(info.get("task", ""))
        task_words, obs_words = _words(task), _words(obs)
        slots = np.zeros((self.max_actions, self.slot_dim), dtype=np.float32)
        for i, command in enumerate(self.commands(info)):
            slots[i, :-2] = self.command_encoder(command)
            slots[i, -2:] = _overlap(command, task_words), _overlap(command, obs_words)
        parts = [self.text_encoder(f"{task}\n{obs}"), slots.ravel()]
        if self.budget_scale is not None:
            if "turns_left" not in info:
                raise KeyError("the budget feature needs info['turns_left']: wrap the env in TurnBudget")
            parts.append(np.array([min(info["turns_left"] / self.budget_scale, 1.0)], dtype=np.float32))
        return np.clip(np.concatenate(parts), 0.0, 1.0).astype(np.float32, copy=False)

    def mask(self, info: dict[str, Any]) -> np.ndarray:
        """Slots holding an admissible command; slot 0 (the empty command) when there is none."""
        mask = np.zeros(self.max_actions, dtype=bool)
        mask[: max(len(self.commands(info)), 1)] = True
        return mask

    def command(self, index: int, info: dict[str, Any]) -> str:
        commands = self.commands(info)
        return commands[index] if 0 <= index < len(commands) else MASKED_ACTION_COMMAND


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def _overlap(command: str, words: frozenset[str]) -> float:
    command_words = _WORD.findall(command.lower())
    return sum(w in words for w in command_words) / len(command_words) if command_words else 0.0


class DiscreteCommands(gym.Wrapper[np.ndarray, np.int64, str, str], gym.utils.RecordConstructorArgs):
    """A text env as ``Discrete(max_actions)`` over its admissible commands, with action masks.

    Args:
        env: a text env (``info["admissible_commands"]`` at every turn).
        max_actions: the size of the action space.
        text_encoder, command_encoder: see :class:`CommandFeatures`.
        budget_feature: add the fraction of the budget left as the last feature; ``None``
            means "when a :class:`TurnBudget` is in ``env``'s wrapper chain".  The scale is
            that budget's largest value (``schedule.max_budget``).

    ``info`` gains ``command`` (the text played) and ``action_mask``.
    """

    def __init__(self, env: gym.Env, max_actions: int = 32, text_encoder: TextEncoder | None = None,
                 command_encoder: TextEncoder | None = None, budget_feature: bool | None = None) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, max_actions=max_actions, text_encoder=text_encoder,
                                                 command_encoder=command_encoder, budget_feature=budget_feature)
        gym.Wrapper.__init__(self, env)
        if not isinstance(env.action_space, spaces.Text):
            raise ValueError(f"DiscreteCommands wraps text envs (Text action space), got {env.action_space}")
        budget = find_turn_budget(env)
        if budget_feature and budget is None:
            raise ValueError("budget_feature=True needs a TurnBudget in the wrapper chain")
        use_budget = budget is not None if budget_feature is None else budget_feature
        self.features = CommandFeatures(max_actions, text_encoder, command_encoder,
                                        budget.schedule.max_budget if use_budget and budget else None)
        self.action_space = spaces.Discrete(self.features.max_actions)
        self.observation_space = self.features.space
        self._info: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        # gymnasium annotates Wrapper.env as Env[WrapperObsType, WrapperActType] (this wrapper's own types,
        # ndarray/int64); the env it wraps is Env[ObsType, ActType] (text: str/str)
        return self._observe(obs, info)  # type: ignore[arg-type]  # a str: see above

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        command = self.features.command(int(action), self._info)
        obs, reward, terminated, truncated, info = self.env.step(command)  # type: ignore[arg-type]  # see reset
        info["command"] = command
        features, info = self._observe(obs, info)  # type: ignore[arg-type]  # a str: see reset
        return features, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """Which actions are admissible now (``sb3_contrib.MaskablePPO`` calls this)."""
        return self.features.mask(self._info)

    def _observe(self, obs: str, info: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        self._info = info
        info["action_mask"] = self.features.mask(info)
        return self.features.encode(obs, info), info


class MaskablePolicy:
    """A trained ``sb3_contrib.MaskablePPO`` as an :class:`agentgym_budget.policies.Policy`.

    ``act(obs, info)`` encodes the turn with the training env's :class:`CommandFeatures` and
    returns the chosen command's text.  ``deterministic=False`` samples from the masked
    action distribution with a generator seeded by ``reset(seed)`` (reproducible Pass@K).
    """

    reads_budget: bool

    def __init__(self, model: Any, features: CommandFeatures, *, deterministic: bool = False,
                 name: str = "maskable-ppo") -> None:
        self.model = model
        self.features = features
        self.deterministic = deterministic
        self.name = name
        self.reads_budget = features.budget_scale is not None
        self._rng = np.random.default_rng()

    def reset(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        probs = self.action_probabilities(obs, info)
        index = int(np.argmax(probs)) if self.deterministic else int(self._rng.choice(len(probs), p=probs))
        return self.features.command(index, info)

    def action_probabilities(self, obs: str, info: dict[str, Any]) -> np.ndarray:
        torch = require("torch", extra="sb3", what="MaskablePolicy")
        policy = self.model.policy
        with torch.no_grad():
            obs_tensor, _ = policy.obs_to_tensor(self.features.encode(obs, info))
            distribution = policy.get_distribution(obs_tensor, action_masks=self.features.mask(info)[None])
            probs = distribution.distribution.probs[0].cpu().numpy().astype(np.float64)
        return probs / probs.sum()
