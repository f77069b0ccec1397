"""The ``hf`` policy: a Hugging Face causal LM prompted ReAct-style with the episode history.

torch and transformers are imported only when the policy is built (extra ``llm``).

Each turn the policy builds a prompt with :func:`~agentgym_budget.policies.prompting.build_prompt`
(task, history of observations and actions, the remaining budget when ``show_budget=True``,
optionally the admissible commands), generates a short continuation and extracts the command
with :func:`~agentgym_budget.policies.prompting.parse_action`.

Example (offline: a tiny randomly initialised model, so the actions are arbitrary):
    >>> from agentgym_budget.policies.hf import HFPolicy, tiny_random_lm
    >>> model, tokenizer = tiny_random_lm(seed=0)
    >>> policy = HFPolicy(model, tokenizer, max_new_tokens=8)
    >>> policy.reset(seed=0)
    >>> action = policy.act("You are in a room.", {"task": "look around", "admissible_commands": ["look"]})
    >>> isinstance(action, str)
    True
"""

from __future__ import annotations

from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.policies.prompting import build_prompt, parse_action

__all__ = ["TINY_RANDOM", "HFPolicy", "tiny_random_lm"]

#: ``model=`` value that builds :func:`tiny_random_lm` instead of loading a model.
TINY_RANDOM = "tiny-random"


class HFPolicy:
    """A causal LM as a policy.

    Args:
        model: a ``transformers`` causal LM, or a name/path for ``AutoModelForCausalLM.from_pretrained``,
            or ``"tiny-random"`` for :func:`tiny_random_lm` (offline smoke runs:
            ``agentgym-budget eval --policy hf --policy-arg model=tiny-random``).
        tokenizer: its tokenizer, or a name/path; ``None`` loads it from ``model``'s path.
        max_new_tokens: generation length per turn (thought + action).
        temperature: sampling temperature; ``0`` means greedy decoding.
        top_p: nucleus sampling mass.
        show_budget: add ``[Turns left: x of T]`` (from ``info``) to the prompt.  The policy
            then reads the budget, so the evaluator runs one rollout per budget.  Leave it
            ``False`` when the env itself shows the budget in the observation
            (``TurnBudget(show_budget=True)``): the text is already in the history.
        list_admissible: list ``info["admissible_commands"]`` in the prompt.
        max_turns_shown: keep only this many recent turns in the prompt.
        max_prompt_tokens: cut the prompt from the left to this many tokens.
        device: torch device for the model (``None``: leave it where it is).
        model_kwargs: passed to ``from_pretrained`` when ``model`` is a path.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_new_tokens: int = 48,
        temperature: float = 0.7,
        top_p: float = 1.0,
        show_budget: bool = False,
        list_admissible: bool = True,
        max_turns_shown: int | None = 20,
        max_prompt_tokens: int = 2048,
        device: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._torch = require("torch", "llm", "the hf policy")
        transformers = require("transformers", "llm", "the hf policy")
        if model == TINY_RANDOM:
            self.name = f"hf({TINY_RANDOM})"
            model, tokenizer = tiny_random_lm()
        elif isinstance(model, str):
            self.name = f"hf({model})"
            tokenizer = tokenizer if tokenizer is not None else model
            model = transformers.AutoModelForCausalLM.from_pretrained(model, **(model_kwargs or {}))
        else:
            self.name = f"hf({type(model).__name__})"
        if tokenizer is None:
            raise ValueError("HFPolicy needs a tokenizer (or a model path to load it from)")
        if isinstance(tokenizer, str):
            tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer)
        if device is not None:
            model = model.to(device)
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.show_budget = bool(show_budget)
        self.reads_budget = self.show_budget
        self.list_admissible = bool(list_admissible)
        self.max_turns_shown = max_turns_shown
        self.max_prompt_tokens = int(max_prompt_tokens)
        self._history: list[tuple[str, str | None]] = []

    def reset(self, seed: int | None = None) -> None:
        self._history = []
        if seed is not None:  # generate() samples from torch's global RNG
            self._torch.manual_seed(seed)

    def prompt(self, obs: str, info: dict[str, Any]) -> str:
        """The prompt for this turn (without changing the history)."""
        budget_text = None
        if self.show_budget and "turns_left" in info:
            budget_text = f"[Turns left: {info['turns_left']} of {info['budget']}]"
        admissible = info.get("admissible_commands") if self.list_admissible else None
        return build_prompt(
            [*self._history, (obs, None)], task=str(info.get("task", "")), budget_text=budget_text,
            admissible=admissible, max_turns_shown=self.max_turns_shown,
        )

    def act(self, obs: str, info: dict[str, Any]) -> str:
        reply = self.generate(self.prompt(obs, info))
        # The model may go on to imagine the next observation: keep only this turn.
        reply = reply.split("Observation:", 1)[0]
        action = parse_action(reply, info.get("admissible_commands"))
        self._history.append((obs, action))
        return action

    def generate(self, prompt: str) -> str:
        """The model's continuation of ``prompt`` (new text only)."""
        torch = self._torch
        ids = self.tokenizer(prompt, return_tensors="pt")["input_ids"][:, -self.max_prompt_tokens :]
        ids = ids.to(self.model.device)
        sampling = self.temperature > 0
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=self.max_new_tokens,
                do_sample=sampling,
                temperature=self.temperature if sampling else None,
                top_p=self.top_p if sampling else None,
                pad_token_id=pad_id,
            )
        return self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def tiny_random_lm(seed: int = 0, hidden_size: int = 32, num_layers: int = 1) -> tuple[Any, Any]:
    """A tiny randomly initialised Llama model and a byte-level tokenizer, built offline.

    For tests and smoke runs of the LLM code paths (no download): the model's outputs are
    random bytes.  Returns ``(model, tokenizer)``.
    """
    torch = require("torch", "llm", "tiny_random_lm")
    transformers = require("transformers", "llm", "tiny_random_lm")
    tokenizers = require("tokenizers", "llm", "tiny_random_lm")
    specials = ["<|pad|>", "<|eos|>"]
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: i for i, char in enumerate(sorted(alphabet))}
    vocab.update({token: len(vocab) + i for i, token in enumerate(specials)})
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    backend.add_special_tokens(specials)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<|pad|>", eos_token="<|eos|>")
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=2, num_key_value_heads=2,
        max_position_embeddings=4096, pad_token_id=vocab["<|pad|>"], eos_token_id=vocab["<|eos|>"],
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    return model, tokenizer
