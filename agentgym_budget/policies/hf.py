"""A local Hugging Face causal LM as a :class:`~agentgym_budget.policies.chat.ChatBackend`.

torch and transformers are imported only when a backend is built (extra ``llm``).

:class:`HFChatBackend` generates the replies of many conversations in one batch: prompts are
left-padded, the prompt is run once and every new token reuses the KV cache.  The sampler is
written out here rather than taken from ``model.generate``: it applies exactly the
:class:`~agentgym_budget.policies.chat.Sampling` asked for (temperature, top-p, the new-token
limit, stop strings) and nothing from the model's ``generation_config`` (a checkpoint's
``repetition_penalty`` or ``top_k`` would otherwise change what the trainer's loss assumes),
and it draws each conversation's tokens from its own seeded generator, so a reply does not
depend on which other conversations share the batch.  Each completion carries its prompt and
reply token ids and the log-probability of every reply token under the sampling distribution.

**Context limit** (:meth:`HFChatBackend.fit`): while a conversation's prompt is longer than
``max_prompt_tokens``, its oldest turn (user message + reply) is dropped — the system message
with the task and the latest observation always stay; if that alone is still too long, its
last ``max_prompt_tokens`` tokens are kept.

Example:
    >>> from agentgym_budget.policies.chat import Sampling
    >>> from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    >>> backend = HFChatBackend(*tiny_model_and_tokenizer("KeyDoor-v0"))
    >>> chats = [[{"role": "user", "content": "Observation: a door."}]] * 2
    >>> a, b = backend.complete(chats, seeds=[1, 2], sampling=Sampling(temperature=1.0, max_new_tokens=5))
    >>> len(a.completion_ids) <= 5, len(a.logprobs) == len(a.completion_ids), a.prompt_ids == b.prompt_ids
    (True, True, True)
    >>> backend.complete(chats[:1], seeds=[1], sampling=Sampling(temperature=1.0, max_new_tokens=5))[0].text == a.text
    True
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.policies.chat import Completion, Message, Sampling
from agentgym_budget.policies.prompting import render_plain

__all__ = ["HFChatBackend", "encode_conversation", "load_model_and_tokenizer"]

#: ``model=`` value that builds the tiny offline model instead of loading one.
TINY = "tiny"


def encode_conversation(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """The prompt token ids of ``messages``: the chat template with the assistant turn opened, or :func:`render_plain`."""
    return tokenizer(_prompt_text(tokenizer, messages), add_special_tokens=False)["input_ids"]


def _prompt_text(tokenizer: Any, messages: Sequence[Message]) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return render_plain(messages)


def load_model_and_tokenizer(model: str, tokenizer: str | None = None, *, tiny_env: str = "ALFWorld-v0",
                             seed: int = 0, **model_kwargs: Any) -> tuple[Any, Any]:
    """``model="tiny"``: the tiny offline model for ``tiny_env``; else ``from_pretrained(model)`` (local or cached)."""
    if model == TINY:
        from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

        return tiny_model_and_tokenizer(tiny_env, seed=seed)
    transformers = require("transformers", "llm", "the hf policy")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(model, **model_kwargs)
    return loaded, load_tokenizer(tokenizer or model)


def load_tokenizer(name: str) -> Any:
    """``AutoTokenizer``, except for a saved plain ``tokenizers`` tokenizer (our tiny one).

    transformers 5's ``AutoTokenizer`` rebuilds a tokenizer of the model's type (e.g.
    ``Qwen2Tokenizer``) with that type's own pre-tokenizer, which silently changes how a
    custom BPE tokenizes; such a checkpoint is loaded as it was saved instead.
    """
    import json
    from pathlib import Path

    transformers = require("transformers", "llm", "the hf policy")
    config_file = Path(name) / "tokenizer_config.json"
    if config_file.is_file():
        saved_class = json.loads(config_file.read_text()).get("tokenizer_class")
        if saved_class in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            return transformers.PreTrainedTokenizerFast.from_pretrained(name)
    return transformers.AutoTokenizer.from_pretrained(name)


class HFChatBackend:
    """Batched generation with a local causal LM (see the module docstring).

    Args:
        model: a ``transformers`` causal LM (``model.eval()`` is the caller's business; the
            backend runs under ``torch.no_grad`` and leaves the mode as it found it).
        tokenizer: its tokenizer (needs a pad or an EOS token).
        max_prompt_tokens: the context limit of a prompt (see :meth:`fit`).
        name: label for tables (default ``hf(<model class>)``).
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_prompt_tokens: int = 2048, name: str | None = None) -> None:
        self._torch = require("torch", "llm", "the hf policy")
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        self.model, self.tokenizer = model, tokenizer
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.name = name or f"hf({type(model).__name__})"
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_id is None:
            raise ValueError("the tokenizer has neither a pad token nor an EOS token")
        # transformers renamed the KV-cache argument (``past_key_values`` -> ``cache``, 5.x)
        self._cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def fit(self, conversation: Sequence[Message]) -> list[int]:
        """The prompt ids of ``conversation`` under the context limit (oldest turns dropped first)."""
        messages = list(conversation)
        while True:
            ids = encode_conversation(self.tokenizer, messages)
            if len(ids) <= self.max_prompt_tokens:
                return ids
            first_turn = 1 if messages[0]["role"] == "system" else 0
            if len(messages) - first_turn <= 1:
                return ids[-self.max_prompt_tokens:]
            # one turn is a user message and the reply to it
            del messages[first_turn: first_turn + (2 if messages[first_turn + 1]["role"] == "assistant" else 1)]

    def complete(self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int],
                 sampling: Sampling) -> list[Completion]:
        """One reply per conversation, all generated in one batch."""
        return self.generate([self.fit(c) for c in conversations], seeds, sampling)

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], sampling: Sampling) -> list[Completion]:
        """One reply per prompt (token ids), in one left-padded batch with a KV cache."""
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts for {len(seeds)} seeds")
        if not prompts:
            return []
        torch = self._torch
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                replies, logprobs = self._decode(prompts, seeds, sampling)
        finally:
            self.model.train(was_training)
        return [self._completion(list(p), r, lp, sampling) for p, r, lp in zip(prompts, replies, logprobs)]

    def _decode(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], sampling: Sampling
                ) -> tuple[list[list[int]], list[list[float]]]:
        torch = self._torch
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(list(ids), dtype=torch.long)
            attention_mask[row, width - len(ids):] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # left padding: each row counts from 0
        generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        eos = self.tokenizer.eos_token_id
        stopper = _StopStrings(self.tokenizer, sampling.stop, len(prompts))
        replies: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        running = [True] * len(prompts)

        # Without padding the mask is all ones: leaving it out spares the model building one per step.
        padded = len({len(p) for p in prompts}) > 1
        out = self.model(input_ids=input_ids, attention_mask=attention_mask if padded else None, position_ids=positions,
                         use_cache=True, logits_to_keep=1)
        next_position = positions[:, -1:] + 1
        for step in range(sampling.max_new_tokens):
            tokens, token_logprobs = _sample(torch, out.logits[:, -1, :], generators, sampling)
            for row, (token, logprob) in enumerate(zip(tokens.tolist(), token_logprobs.tolist())):
                if running[row]:
                    replies[row].append(token)
                    logprobs[row].append(logprob)
                    running[row] = token != eos and not stopper.hit(row, token)
            if not any(running) or step == sampling.max_new_tokens - 1:
                break
            if padded:
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(prompts), 1))], dim=1)
            cache = {self._cache_arg: getattr(out, self._cache_arg)}
            out = self.model(input_ids=tokens[:, None], attention_mask=attention_mask if padded else None,
                             position_ids=next_position, use_cache=True, **cache)
            next_position = next_position + 1
        return replies, logprobs

    def _completion(self, prompt: list[int], reply: list[int], logprobs: list[float], sampling: Sampling) -> Completion:
        text = self.tokenizer.decode(reply, skip_special_tokens=True)
        for stop in sampling.stop:
            text = text.split(stop, 1)[0]
        return Completion(text=text, prompt_tokens=len(prompt), completion_tokens=len(reply), prompt_ids=prompt,
                          completion_ids=reply, logprobs=logprobs)


def _sample(torch: Any, logits: Any, generators: Sequence[Any], sampling: Sampling) -> tuple[Any, Any]:
    """Next token and its log-probability per row: greedy at temperature 0, else temperature + top-p."""
    logits = logits.float()
    if sampling.temperature == 0:
        tokens = logits.argmax(-1)
        return tokens, torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]
    scores = logits / sampling.temperature
    if sampling.top_p < 1.0:
        sorted_scores, order = scores.sort(-1, descending=True)
        # drop a token once the mass of the tokens ranked above it reaches top_p (the top one stays)
        mass_above = sorted_scores.softmax(-1).cumsum(-1) - sorted_scores.softmax(-1)
        sorted_scores = sorted_scores.masked_fill(mass_above >= sampling.top_p, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)
    logp = torch.log_softmax(scores, -1)
    # Gumbel-max with one generator per row: row i's draw depends on its own seed alone.
    uniform = torch.stack([torch.rand(scores.shape[-1], generator=g, device=scores.device) for g in generators])
    gumbel = -torch.log(-torch.log(uniform.clamp_(1e-20, 1.0)))
    tokens = (logp + gumbel).argmax(-1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


class _StopStrings:
    """Watches each row's decoded text for a stop string, one new token at a time."""

    def __init__(self, tokenizer: Any, stops: Sequence[str], rows: int) -> None:
        self.tokenizer, self.stops = tokenizer, tuple(stops)
        self.tails = [""] * rows
        self.keep = max((len(s) for s in self.stops), default=0)

    def hit(self, row: int, token: int) -> bool:
        if not self.stops:
            return False
        tail = self.tails[row] + self.tokenizer.decode([token], skip_special_tokens=True)
        self.tails[row] = tail[-(2 * self.keep):]
        return any(stop in tail for stop in self.stops)
