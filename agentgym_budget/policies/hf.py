"""A local Hugging Face causal LM as a :class:`~agentgym_budget.policies.chat.ChatBackend`.

torch and transformers are imported only when a backend is built (extra ``llm``).

:class:`HFChatBackend` generates the replies of many conversations in one batch: prompts are
left-padded, the prompt is run once and every new token reuses the KV cache — one
:class:`~agentgym_budget.policies.kv_cache.BatchKVCache` preallocated for the batch (prompt +
new-token limit) and written in place, never grown by concatenation.  Each row's prompt — the
part reused from its conversation's cache, then its new tokens — sits in one piece, right-aligned
to the longest prompt, so the cache is as wide as the longest prompt plus the reply however the
prompts split into reused and new tokens (a row re-encoded in full past the context limit no longer
widens every other row by its length: append-only conversations at 32 in flight 14.8 -> 12.5
CPU-ms per turn on the tiny model).  The prompts run in
groups of a few rows ordered by how many new tokens they have, each group over the columns its
rows use (so a short row does not run as many pads as the longest has tokens: prefill 3.3 -> 2.4
CPU-ms per turn at 32 episodes in flight on the tiny model).  A row whose reply has
ended leaves the batch at once (the batch is compacted, rather than the row fed on and masked:
28 % less CPU time per batch of 32 whose replies end at different steps, measured with a stop
string on the tiny model), so finished rows cost nothing.  The sampler is
written out here rather than taken from ``model.generate``: it applies exactly the
:class:`~agentgym_budget.policies.chat.Sampling` asked for (temperature, top-p, the new-token
limit, stop strings) and nothing from the model's ``generation_config`` (a checkpoint's
``repetition_penalty`` or ``top_k`` would otherwise change what the trainer's loss assumes),
and it draws each conversation's tokens from its own seeded generator, so a reply does not
depend on which other conversations share the batch.  Each completion carries its prompt and
reply token ids and the log-probability of every reply token under the sampling distribution.

**Compiled decode step** (``compile=True``): the model's one-token forward pass goes through
``torch.compile`` (inductor) over the static layout of the batch's cache
(:class:`~agentgym_budget.policies.kv_cache.BatchKVCache` with ``static=True``): each step
writes its column at a position tensor and attends over the whole preallocated width under a
mask whose columns open one per step, so every step of a reply has the same shapes.  The rows
and the width stay symbolic (``dynamic=True``), so the step is traced twice in all — for a
single row and for several — however the batch is compacted and whatever width a call's
prompts need (rounding the width up to buckets of 128 with only the rows symbolic ran no faster
and traced again for every new bucket).  Its attention groups a query's heads by the key-value
head they share (:func:`_packed_decode_attention`) rather than copying the cache per head.  On
the tiny model on CPU it halves a decode step at batch 1 (0.50 vs 0.90 CPU-ms) and saves a
sixth at batch 32 (2.05 vs 2.49); the static layout run eagerly is no faster than the default
one, so eager steps keep the default.  Where compiling fails it runs eagerly, with a warning.

**Shared prefixes** (``share_prefix=True``, the default): prompts of one batch that begin with the same
tokens — a group's episodes share the system message and the task — run that prefix once, at batch
size 1, and its keys and values (and the hidden states ``keep_hidden_at`` keeps) are copied into each
row, which then runs only its remainder, as a conversation's own reused prefix does (a prefix that
at least two prompts share, or one computed for an earlier batch, kept by its tokens until the
weights change).  The same tokens at the same positions under the same weights: the reply is the
one a full run gives up to float rounding (a batch-1 pass and a batched one round apart; see
``tests/test_shared_prefix.py`` for how far).

**Append-only conversations** (``previous=`` in :meth:`HFChatBackend.complete`, what
``LLMPolicy(history="append")`` passes): a conversation continues from the exact ids of its last
prompt and the reply sampled for it, followed by the ids that close that reply and open the new
message (:meth:`HFChatBackend.appended_ids`); past replies are never re-tokenised, and with the
per-conversation KV cache only the new message runs through the model.

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

import functools
import inspect
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym_budget._optional import require
from agentgym_budget.compiling import compiled
from agentgym_budget.policies.chat import Completion, Message, Sampling
from agentgym_budget.policies.kv_cache import BatchKVCache
from agentgym_budget.policies.prompting import render_plain
from agentgym_budget.policies.smollm2 import NAME as SMOLLM2
from agentgym_budget.policies.smollm2 import hf_folder

__all__ = ["DECODE_ATTENTION", "HFChatBackend", "encode_conversation", "load_model_and_tokenizer"]

#: ``model=`` value that builds the tiny offline model instead of loading one.
TINY = "tiny"

#: Fewest tokens a prefix shared by several prompts must have to run on its own: a shorter one (a chat
#: template's opening) saves less than the extra forward call costs.
_MIN_SHARED_TOKENS = 16

#: Shared prefixes kept between calls at most (least recently made dropped first): each holds every layer's keys
#: and values of its tokens (SmolLM2, 1,000 tokens: 46 MB), and a batch's prompts share a few (one per task).
_MAX_SHARED = 16

#: Rows of a prefill run through the model together (rows ordered by new tokens): smaller groups run
#: fewer pads but pay the model's per-call overhead more often.
_PREFILL_ROWS = 4


def encode_conversation(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """The prompt token ids of ``messages``: the chat template with the assistant turn opened, or :func:`render_plain`."""
    return tokenizer(_prompt_text(tokenizer, messages), add_special_tokens=False)["input_ids"]


def _prompt_text(tokenizer: Any, messages: Sequence[Message]) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return render_plain(messages)


# Stands for a reply while the chat template renders what follows one (no template alters it).
_REPLY_MARK = "<<reply-7f3c>>"


def _text_after_reply(tokenizer: Any, message: Message) -> str:
    """What the chat template writes after an assistant reply, to show ``message`` and open the next reply."""
    text = _prompt_text(tokenizer, [{"role": "user", "content": "x"}, {"role": "assistant", "content": _REPLY_MARK},
                                    dict(message)])
    if _REPLY_MARK not in text:
        raise ValueError("this chat template does not show past replies, so a conversation cannot be append-only: "
                         "use LLMPolicy(history='replies')")
    return text.split(_REPLY_MARK, 1)[1]


def load_model_and_tokenizer(model: str, tokenizer: str | None = None, *, tiny_env: str = "ALFWorld-v0",
                             seed: int = 0, **model_kwargs: Any) -> tuple[Any, Any]:
    """``model="tiny"``: the tiny offline model for ``tiny_env``; ``model="smollm2"``: SmolLM2-135M-Instruct
    (extra ``smollm2``; its GGUF converted once into a checked cache folder, see
    :mod:`agentgym_budget.policies.smollm2`); else ``from_pretrained(model)`` (local or cached)."""
    if model == TINY:
        from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

        return tiny_model_and_tokenizer(tiny_env, seed=seed)
    transformers = require("transformers", "llm", "the hf policy")
    if model == SMOLLM2:
        model = str(hf_folder())
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


@dataclass
class _Prefix:
    """Keys and values a conversation left in the model, kept for its next turn."""

    ids: list[int]  # the tokens they belong to (prompt + reply tokens fed back)
    kv: list[tuple[Any, Any]]  # per layer: keys, values, each [kv_heads, len(ids), head_dim]
    hidden: Any = None  # [len(ids), hidden]: what entered layer ``keep_hidden_at`` (when the backend keeps it)


@dataclass
class _Batch:
    """The rows still decoding: their conversations' indices, cache, mask and next positions."""

    rows: list[int]  # the prompt index of each batch row
    cache: BatchKVCache
    model_cache: Any  # the transformers Cache over ``cache``
    mask: Any  # [rows, capacity] bool, True = a real token (attended), or None when no row is padded
    next_position: Any  # [rows, 1] position of each row's next token
    logits: Any  # [rows, vocab] the next token's logits

    def keep(self, places: Any) -> None:
        """Keep only the rows at ``places`` (a 1-D index tensor): the others have ended."""
        self.rows = [self.rows[p] for p in places.tolist()]
        self.cache.keep_rows(places)
        self.mask = self.mask.index_select(0, places) if self.mask is not None else None
        self.next_position = self.next_position.index_select(0, places)
        self.logits = None  # replaced by the next step


#: The choices of :class:`HFChatBackend`'s ``decode_attention``.
DECODE_ATTENTION = ("auto", "grouped", "transformers")


class HFChatBackend:
    """Batched generation with a local causal LM (see the module docstring).

    Args:
        model: a ``transformers`` causal LM (the backend runs it under ``torch.no_grad`` in
            eval mode and leaves the mode as it found it).
        tokenizer: its tokenizer (needs a pad or an EOS token).
        max_prompt_tokens: the context limit of a prompt (see :meth:`fit`).
        name: label for tables (default ``hf(<model class>)``).
        reuse_prefix: keep each conversation's keys and values between its turns (see
            :meth:`complete`); ``False`` runs every prompt in full.
        max_cached: conversations whose keys and values are kept at most (least recently
            used dropped first; at least twice the largest batch seen).
        compile: run the decode step (one token per row) through ``torch.compile`` (inductor)
            with the cache's static layout (see the module docstring), eager with a warning
            where compiling fails (experiments/rollout_speed/README.md has the figures).
        decode_attention: how a decode step's one-token query meets the keys and values when its
            query heads share key-value heads: ``"grouped"`` (one attention call per key-value
            head's group), ``"transformers"`` (transformers' own ``sdpa`` call, ``enable_gqa``), or
            ``"auto"``: grouped when compiled or when the weights are not float32 — in bfloat16
            the CPU kernel's ``enable_gqa`` path took 2.4x the CPU, in float32 both cost the same
            and transformers' path keeps the trainer's numerics bit for bit
            (``benchmarks/decode_attention_ab.py``, experiments/rollout_speed/README.md).
        share_prefix: run a token prefix that several prompts of a batch share (or that an earlier
            batch computed) once and copy its keys and values into each row (see the module
            docstring); ``False`` runs each prompt's tokens in its own row.
        keep_hidden_at: a decoder layer's index: every completion also carries the hidden states
            that entered that layer for each token the model was fed — the prompt (a reused
            prefix's from the turn that computed it), then the reply but its last token —
            as ``Completion.hidden_states`` ``[tokens, hidden]`` (float, on the model's device).
            What the trainer's loss reuses of the frozen layers below it (``TrainConfig.trunk_reuse``).
    """

    #: where the model runs, not what it replies: a resume may change it
    settings_without_effect = ("device",)

    def __init__(self, model: Any, tokenizer: Any, *, max_prompt_tokens: int = 2048, name: str | None = None,
                 reuse_prefix: bool = True, max_cached: int = 64, compile: bool = False,
                 decode_attention: str = "auto", keep_hidden_at: int | None = None,
                 share_prefix: bool = True) -> None:
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
        self.reuses_prefixes = bool(reuse_prefix)
        self.max_cached = int(max_cached)
        self._prefixes: OrderedDict[Hashable, _Prefix] = OrderedDict()
        self.shares_prefixes = bool(share_prefix)
        self._shared: OrderedDict[tuple[int, ...], _Prefix] = OrderedDict()  # shared prefixes, by their tokens
        self._weights_version: int | None = None
        self.reused_tokens = self.prompt_tokens_run = 0  # how much of the prompts the cache spared
        self._static = bool(compile)  # the compiled step needs the static layout (BatchKVCache(static=True))
        if decode_attention not in DECODE_ATTENTION:
            raise ValueError(f"decode_attention must be one of {DECODE_ATTENTION}, got {decode_attention!r}")
        grouped = decode_attention == "grouped" or (
            decode_attention == "auto" and (compile or next(model.parameters()).dtype != self._torch.float32))
        step = compiled(model, dynamic=True) if compile else model  # compiled: rows and cache width symbolic
        self._decode_step = (lambda **inputs: _with_packed_decode_attention(model, step, inputs)) if grouped else step
        self.keep_hidden_at = _hidden_layer(model, keep_hidden_at, compile)

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

    #: :meth:`complete` continues a conversation from the ids it was fed and sampled (``previous=``)
    appends_ids = True

    def complete(self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int], sampling: Sampling,
                 keys: Sequence[Hashable] | None = None,
                 previous: Sequence[Sequence[int] | None] | None = None) -> list[Completion]:
        """One reply per conversation, all generated in one batch.

        ``keys`` name the conversations (an LLM policy passes one per episode): a conversation
        continued under the same key reuses the keys and values the model computed for it last
        time, for the longest common prefix of the old and the new prompt, and runs only the
        rest.  Keys and values depend only on the tokens and their positions, so the reply is
        the one a full run gives (up to float rounding); the cache is dropped when the model's
        weights change in place (an optimizer step).

        ``previous`` (append-only conversations): per conversation, its last prompt's ids followed
        by the reply ids sampled for it (``None`` or empty: the first turn, encoded from the text);
        the prompt is then ``previous`` + :meth:`appended_ids` of the conversation's last message,
        so every past reply stays the ids the model sampled.  A prompt that would pass the context
        limit is encoded from the conversation's text instead (:meth:`fit`), and appending goes on
        from there.
        """
        if previous is not None and len(previous) != len(conversations):
            raise ValueError(f"{len(previous)} previous id lists for {len(conversations)} conversations")
        earlier = previous if previous is not None else [None] * len(conversations)
        return self.generate([self._prompt(c, p) for c, p in zip(conversations, earlier)], seeds, sampling, keys)

    def _prompt(self, conversation: Sequence[Message], previous: Sequence[int] | None) -> list[int]:
        """The prompt ids: appended to ``previous`` while that fits the context limit, else :meth:`fit`."""
        if previous:
            ids = list(previous) + self.appended_ids(previous, conversation[-1])
            if len(ids) <= self.max_prompt_tokens:
                return ids
        return self.fit(conversation)

    def appended_ids(self, previous: Sequence[int], message: Message) -> list[int]:
        """The ids that follow a sampled reply (the end of ``previous``) to add ``message`` and open the next reply.

        The chat template's text after an assistant turn: its end-of-turn marker, ``message``,
        the generation prompt (:func:`render_plain`: a newline, the message, ``Thought:``).  A
        reply that ended on the EOS token already holds that marker when the template spells it
        as the EOS token (ChatML's ``<|im_end|>``), so it is not added twice.
        """
        text = _text_after_reply(self.tokenizer, message)
        eos = self.tokenizer.eos_token
        if previous and previous[-1] == self.tokenizer.eos_token_id and eos and text.startswith(eos):
            text = text[len(eos):]
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def forget(self, key: Hashable) -> None:
        """Drop what is kept for conversation ``key`` (its episode is over)."""
        self._prefixes.pop(key, None)

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], sampling: Sampling,
                 keys: Sequence[Hashable] | None = None) -> list[Completion]:
        """One reply per prompt (token ids), in one left-padded batch with a KV cache."""
        if len(prompts) != len(seeds) or (keys is not None and len(keys) != len(prompts)):
            raise ValueError(f"{len(prompts)} prompts for {len(seeds)} seeds and {len(keys or seeds)} keys")
        if not prompts:
            return []
        torch = self._torch
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                replies, logprobs, hidden = self._decode([list(p) for p in prompts], seeds, sampling,
                                                         keys if self.reuses_prefixes else None)
        finally:
            self.model.train(was_training)
        return [self._completion(list(p), r, lp, sampling, h)
                for p, r, lp, h in zip(prompts, replies, logprobs, hidden)]

    # -- generation ------------------------------------------------------------------------------
    def _decode(self, prompts: list[list[int]], seeds: Sequence[int], sampling: Sampling,
                keys: Sequence[Hashable] | None) -> tuple[list[list[int]], list[list[float]], list[Any]]:
        """Sample every row's reply; a row that ends (EOS, a stop string) leaves the batch at once.

        Returns the replies, their tokens' log-probs and, per row, the hidden states kept
        (``keep_hidden_at``; else ``None``)."""
        device = next(self.model.parameters()).device
        self._drop_if_weights_changed()
        reused = self._reusable(prompts, keys)
        if self.shares_prefixes:
            reused = self._share_prefixes(prompts, reused, device)
        capture = None
        if self.keep_hidden_at is not None:
            capture = _HiddenCapture(self.model.get_decoder().layers[self.keep_hidden_at], reused)
        try:
            replies, logprobs = self._sample_replies(prompts, reused, seeds, sampling, keys, device, capture)
        finally:
            if capture is not None:
                capture.close()
        hidden = [capture.states(row) for row in range(len(prompts))] if capture is not None else [None] * len(prompts)
        return replies, logprobs, hidden

    def _sample_replies(self, prompts: list[list[int]], reused: list[_Prefix | None], seeds: Sequence[int],
                        sampling: Sampling, keys: Sequence[Hashable] | None, device: Any,
                        capture: _HiddenCapture | None) -> tuple[list[list[int]], list[list[float]]]:
        torch = self._torch
        batch = self._prefill(prompts, reused, device, sampling.max_new_tokens, capture)
        draws = _UniformDraws(torch, seeds, device, sampling.max_new_tokens, batch.logits.shape[-1])
        stopper = _StopStrings(self.tokenizer, sampling.stop, len(prompts))
        replies: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        for step in range(sampling.max_new_tokens):
            tokens, ended = self._sample_next(batch, draws.next(batch.rows) if sampling.temperature else None,
                                              sampling, stopper, replies, logprobs)
            if step == sampling.max_new_tokens - 1:
                ended = list(range(len(batch.rows)))
            if ended and keys is not None:
                self._keep(keys, prompts, replies, batch, ended, capture)
            if len(ended) == len(batch.rows):
                break
            if ended:  # compact: the ended rows stop costing compute (one copy of the cache per ending step)
                running = torch.tensor(sorted(set(range(len(batch.rows))) - set(ended)), device=device)
                batch.keep(running)
                tokens = tokens.index_select(0, running)
            self._step(batch, tokens)
            if capture is not None:
                capture.take_step(batch.rows)
        return replies, logprobs

    def _sample_next(self, batch: _Batch, uniform: Any, sampling: Sampling, stopper: _StopStrings,
                     replies: list[list[int]], logprobs: list[list[float]]) -> tuple[Any, list[int]]:
        """Sample each row's next token into its reply; ``(tokens, places of the rows whose reply ended)``."""
        tokens, token_logprobs = _sample(self._torch, batch.logits, uniform, sampling)
        ended = []
        for place, (row, token, logprob) in enumerate(zip(batch.rows, tokens.tolist(), token_logprobs.tolist())):
            replies[row].append(token)
            logprobs[row].append(logprob)
            if token == self.tokenizer.eos_token_id or stopper.hit(row, token):
                ended.append(place)
        return tokens, ended

    def _step(self, batch: _Batch, tokens: Any) -> None:
        """Feed each row its sampled token: one forward pass writing one column of the cache.

        Static layout (compiled step): the mask spans the whole capacity and this step opens its
        own column, so the shapes are the same at every step; else it spans the filled columns.
        """
        if batch.cache.static:  # the whole capacity, this step's column opened (the later ones stay masked)
            batch.mask[:, batch.cache.length] = True
            mask = batch.mask[:, None, None, :]
        else:  # a 4-D mask (a view) is used as it is: the model does not rebuild one from a 2-D mask every step
            mask = batch.mask[:, None, None, : batch.cache.length + 1] if batch.mask is not None else None
        out = self._decode_step(input_ids=tokens[:, None], attention_mask=mask, position_ids=batch.next_position,
                                use_cache=True, **{self._cache_arg: batch.model_cache})
        batch.cache.advance(1)
        batch.next_position += 1
        batch.logits = out.logits[:, -1, :]

    def _prefill(self, prompts: list[list[int]], reused: list[_Prefix | None], device: Any, max_new_tokens: int,
                 capture: _HiddenCapture | None = None) -> _Batch:
        """Run each prompt's tokens after its reused prefix into a cache preallocated for the whole reply.

        Row layout: ``[pad | reused prefix | new tokens | decoded tokens]`` — every prompt in one
        piece, right-aligned so that all end at the same column (the longest prompt's length), the
        pads masked out, every token at its own position in its conversation.  The cache is then
        as wide as the longest prompt plus the reply, however the prompts split into reused and
        new tokens.  Rows are ordered by how many new tokens they run and go through the model in
        groups of :data:`_PREFILL_ROWS` (:meth:`_prefill_group`), so a row with few new tokens does
        not run as many pads as the batch's longest has tokens; the pads a row does run sit over
        its prefix, which their writes leave as it is (``BatchKVCache.window``'s ``pads``).
        """
        torch = self._torch
        reused_lengths = [len(r.ids) if r is not None else 0 for r in reused]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) - reused_lengths[i])
        prompts, reused = [prompts[i] for i in order], [reused[i] for i in order]
        past = [reused_lengths[i] for i in order]
        new = [p[n:] for p, n in zip(prompts, past)]
        width, new_width = max(len(p) for p in prompts), max(len(n) for n in new)
        rows = len(prompts)
        # the last sampled token is never fed back
        cache = BatchKVCache(width + max(max_new_tokens - 1, 0), rows=rows, static=self._static)
        input_ids = torch.full((rows, new_width), self.pad_id, dtype=torch.long)
        mask = torch.ones((rows, cache.capacity), dtype=torch.bool)
        mask[:, :width] = False
        positions = torch.zeros((rows, new_width), dtype=torch.long)
        for row, (prompt, ids) in enumerate(zip(prompts, new)):
            input_ids[row, new_width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            positions[row, new_width - len(ids):] = torch.arange(len(prompt) - len(ids), len(prompt))
            mask[row, width - len(prompt): width] = True
        self.reused_tokens += sum(past)
        self.prompt_tokens_run += sum(len(n) for n in new)
        self._write_prefixes(cache, reused, [width - len(n) for n in new])
        # Without padding the mask is all ones: leaving it out spares the model building one per step.
        padded = not bool(mask.all())
        if self._static:  # the decode steps attend over the whole capacity: its columns open one per step
            mask[:, width:] = False
        mask = mask.to(device) if padded or self._static else None
        input_ids, positions = input_ids.to(device), positions.to(device)
        # rows with as many new tokens each run no pads: one pass
        group_rows = rows if len({len(n) for n in new}) == 1 else _PREFILL_ROWS
        groups = [slice(first, first + group_rows) for first in range(0, rows, group_rows)]
        prefill_mask = mask if padded else None
        logits = []
        for group in groups:
            logits.append(self._prefill_group(cache, group, prompts, new, width, input_ids, positions, prefill_mask))
            if capture is not None:  # each row's new tokens are its last columns of the group's input
                capture.take_prefill(order[group], [len(n) for n in new[group]])
        logits = torch.cat(logits)
        cache.advance(width)
        next_position = torch.tensor([[len(p)] for p in prompts], dtype=torch.long, device=device)
        return _Batch(order, cache, cache.model_cache(self.model.config.num_hidden_layers), mask, next_position, logits)

    def _prefill_group(self, cache: BatchKVCache, rows: slice, prompts: list[list[int]], new: list[list[int]],
                       width: int, input_ids: Any, positions: Any, mask: Any) -> Any:
        """One forward pass of the batch rows ``rows`` over the columns they use; their next-token logits.

        The group runs as many new tokens as its longest row (the last columns of the prompts) and
        attends from its longest prompt's first column on.  A row with fewer new tokens runs pads
        over the end of its reused prefix: nothing reads their outputs (the logits kept are each
        row's last column's) and their keys and values are not written (``BatchKVCache.window``'s
        ``pads``), so the prefix stays in the cache; the left pads are masked out as keys.  ``width``
        is the column every prompt ends at (the longest prompt's length).
        """
        new_width = input_ids.shape[1]
        group_new = max(len(n) for n in new[rows])
        first_column = width - max(len(p) for p in prompts[rows])
        pads = [group_new - len(n) for n in new[rows]]
        window = cache.window(rows, first_column, width - group_new - first_column, pads=pads if any(pads) else None)
        attention = None if mask is None else _prefill_mask(self._torch, mask[rows, first_column:], window.length,
                                                             group_new, self.model.dtype)
        out = self.model(input_ids=input_ids[rows, new_width - group_new:], attention_mask=attention,
                         position_ids=positions[rows, new_width - group_new:], use_cache=True, logits_to_keep=1,
                         **{self._cache_arg: window.model_cache(self.model.config.num_hidden_layers)})
        return out.logits[:, -1, :]

    def _reusable(self, prompts: list[list[int]], keys: Sequence[Hashable] | None) -> list[_Prefix | None]:
        """Per prompt, the kept prefix to reuse (cut to the longest common prefix; one new token at least)."""
        if keys is None:
            return [None] * len(prompts)
        reused: list[_Prefix | None] = []
        for key, prompt in zip(keys, prompts):
            kept = self._prefixes.get(key)
            common = _common_prefix(kept.ids, prompt) if kept is not None else 0
            common = min(common, len(prompt) - 1)
            if kept is None or common == 0 or (self.keep_hidden_at is not None and kept.hidden is None):
                reused.append(None)
                continue
            reused.append(_cut(kept, common))
        return reused

    def _drop_if_weights_changed(self) -> None:
        """Forget every kept prefix when an optimizer step has changed the weights (nothing kept is valid then)."""
        version = sum(p._version for p in self.model.parameters())  # LoRA: only the adapters change
        if version != self._weights_version:
            self._prefixes.clear()
            self._shared.clear()
            self._weights_version = version

    def _share_prefixes(self, prompts: list[list[int]], reused: list[_Prefix | None],
                        device: Any) -> list[_Prefix | None]:
        """Per prompt, the longer of its own reused prefix and the longest it shares with another prompt or a kept
        shared prefix; each shared prefix runs once (:meth:`_shared_prefix`), the shorter first, so that a longer
        one runs only the tokens it adds to a shorter one."""
        in_batch = _shared_lengths(prompts)
        out = list(reused)
        for row in sorted(range(len(prompts)), key=lambda i: in_batch[i]):
            prompt, mine = prompts[row], reused[row]
            kept, kept_length = self._longest_shared(prompt, len(prompt) - 1)
            length = max(in_batch[row], kept_length)
            if length <= (len(mine.ids) if mine is not None else 0) or length < _MIN_SHARED_TOKENS:
                continue
            if kept is not None and length == kept_length:
                out[row] = _cut(kept, length)
            else:
                out[row] = self._shared_prefix(prompt[:length], device)
        return out

    def _longest_shared(self, ids: list[int], most: int) -> tuple[_Prefix | None, int]:
        """The kept shared prefix with the longest common prefix with ``ids`` (``most`` tokens at most), and that
        length."""
        best, length = None, 0
        for kept in self._shared.values():
            common = min(_common_prefix(kept.ids, ids), most)
            if common > length:
                best, length = kept, common
        return best, length

    def _shared_prefix(self, ids: list[int], device: Any) -> _Prefix:
        """The keys, values (and kept hidden states) of ``ids`` at positions 0.., run at batch size 1 on top of the
        longest kept shared prefix they begin with; kept for the next prompts that share them."""
        torch = self._torch
        base, start = self._longest_shared(ids, len(ids) - 1)
        cache = BatchKVCache(len(ids), rows=1)
        if base is not None:
            for layer, (keys, values) in enumerate(base.kv):
                cache.write(layer, keys[:, :start], values[:, :start], start=0, row=0)
            cache.advance(start)
        capture = None
        if self.keep_hidden_at is not None:
            capture = _HiddenCapture(self.model.get_decoder().layers[self.keep_hidden_at],
                                     [_cut(base, start) if base is not None else None])
        try:
            self.model(input_ids=torch.tensor([ids[start:]], device=device),
                       position_ids=torch.arange(start, len(ids), device=device)[None], use_cache=True,
                       logits_to_keep=1, **{self._cache_arg: cache.model_cache(self.model.config.num_hidden_layers)})
            if capture is not None:
                capture.take_prefill([0], [len(ids) - start])
        finally:
            if capture is not None:
                capture.close()
        cache.advance(len(ids) - start)
        self.prompt_tokens_run += len(ids) - start
        kv = [(keys[0], values[0]) for keys, values in (cache.filled(layer) for layer in range(len(cache.keys)))]
        prefix = _Prefix(list(ids), kv, capture.states(0) if capture is not None else None)
        self._shared[tuple(ids)] = prefix
        while len(self._shared) > _MAX_SHARED:
            self._shared.popitem(last=False)
        return prefix

    @staticmethod
    def _write_prefixes(cache: BatchKVCache, reused: list[_Prefix | None], ends: list[int]) -> None:
        """Write each reused prefix into its row of the cache, to end at column ``ends[row]`` (each copied once)."""
        for row, (prefix, end) in enumerate(zip(reused, ends)):
            if prefix is not None:
                for layer, (keys, values) in enumerate(prefix.kv):
                    cache.write(layer, keys, values, start=end - keys.shape[1], row=row)

    def _keep(self, keys: Sequence[Hashable], prompts: list[list[int]], replies: list[list[int]], batch: _Batch,
              places: Sequence[int], capture: _HiddenCapture | None = None) -> None:
        """Keep the keys and values of the rows at ``places`` for the tokens they were fed (all but the last)."""
        torch = self._torch
        for place in places:
            row = batch.rows[place]
            ids = prompts[row] + replies[row][:-1]
            if batch.mask is None:  # unpadded: every column is the row's own
                columns = torch.arange(len(ids))
            else:
                columns = batch.mask[place, : batch.cache.length].nonzero().flatten()
            kv = []
            for layer in range(len(batch.cache.keys)):
                k, v = batch.cache.filled(layer)
                columns = columns.to(k.device)
                kv.append((k[place].index_select(1, columns), v[place].index_select(1, columns)))
            self._prefixes[keys[row]] = _Prefix(ids, kv, capture.states(row) if capture is not None else None)
            self._prefixes.move_to_end(keys[row])
        self.max_cached = max(self.max_cached, 2 * len(keys))
        while len(self._prefixes) > self.max_cached:
            self._prefixes.popitem(last=False)

    def _completion(self, prompt: list[int], reply: list[int], logprobs: list[float], sampling: Sampling,
                    hidden: Any = None) -> Completion:
        text = self.tokenizer.decode(reply, skip_special_tokens=True)
        for stop in sampling.stop:
            text = text.split(stop, 1)[0]
        return Completion(text=text, prompt_tokens=len(prompt), completion_tokens=len(reply), prompt_ids=prompt,
                          completion_ids=reply, logprobs=logprobs, hidden_states=hidden)


def _hidden_layer(model: Any, layer: int | None, compile: bool) -> int | None:
    """``keep_hidden_at`` checked against the model (a layer it has; not with a compiled step, whose graph a
    Python hook would break)."""
    if layer is None:
        return None
    depth = len(model.get_decoder().layers)
    if not 0 <= layer < depth:
        raise ValueError(f"keep_hidden_at={layer} is not a decoder layer of this model (0 .. {depth - 1})")
    if compile:
        raise ValueError("keep_hidden_at needs the eager decode step (compile=False)")
    return int(layer)


class _HiddenCapture:
    """The hidden states entering one decoder layer, gathered per conversation as a batch generates.

    A forward pre-hook on the layer keeps its last input; after each prefill group and decode step
    the caller says which conversations' tokens that input held.  A row's states are, in token
    order: its reused prefix's (kept from an earlier turn: the same tokens at the same positions
    under the same frozen layers), its new prompt tokens', then one per reply token fed back.
    """

    def __init__(self, layer: Any, reused: list[_Prefix | None]) -> None:
        self.parts: list[list[Any]] = [[prefix.hidden] if prefix is not None and prefix.hidden is not None else []
                                       for prefix in reused]
        self.last: Any = None
        self.handle = layer.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        self.last = args[0] if args else kwargs["hidden_states"]

    def take_prefill(self, rows: Sequence[int], new_tokens: Sequence[int]) -> None:
        """The last prefill group held ``rows`` (conversation indices), each with its ``new_tokens`` last columns."""
        width = self.last.shape[1]
        for place, (row, count) in enumerate(zip(rows, new_tokens)):
            self.parts[row].append(self.last[place, width - count:])

    def take_step(self, rows: Sequence[int]) -> None:
        """The last decode step fed one token to each of ``rows``, in batch order."""
        for place, row in enumerate(rows):
            self.parts[row].append(self.last[place])

    def states(self, row: int) -> Any:
        """``[tokens fed, hidden]`` of conversation ``row`` so far (joined once, then kept joined)."""
        parts = self.parts[row]
        if len(parts) > 1:  # the model's torch: this module imports torch only when a backend is built
            self.parts[row] = parts = [require("torch", "llm", "the hf policy").cat(parts)]
        return parts[0] if parts else None

    def close(self) -> None:
        self.handle.remove()


def _prefill_mask(torch: Any, valid: Any, past_width: int, new_width: int, dtype: Any) -> Any:
    """The additive 4-D ``[rows, 1, new_width, past_width + new_width]`` mask of a prefill: causal over real columns.

    ``valid`` is ``[rows, capacity]`` (True = a real token).  A query sees (0) the real columns at
    or before its own; every other column gets a large negative bias, finite, so that a pad
    query, which sees no column, gets an even softmax instead of NaN (a NaN there would reach
    the real rows through the pad's value); twice the bias still fits the dtype.  A float mask
    built once here, as one broadcast add: torch's attention would convert a boolean mask to a
    float one in every layer, a conversion per layer that a many-layer model pays many times over.
    """
    columns = past_width + new_width
    hidden = torch.finfo(dtype).min / 4
    column = torch.arange(columns, device=valid.device)
    later = column[None, :] > column[past_width:, None]  # [new_width, columns]: after the query's own column
    causal_bias = torch.zeros(later.shape, dtype=dtype, device=valid.device).masked_fill_(later, hidden)
    pad_bias = torch.zeros((valid.shape[0], columns), dtype=dtype, device=valid.device)
    pad_bias.masked_fill_(~valid[:, :columns], hidden)
    return pad_bias[:, None, None, :] + causal_bias


def _with_packed_decode_attention(model: Any, step: Any, inputs: dict[str, Any]) -> Any:
    """``step(**inputs)`` with a model using ``sdpa`` switched to :func:`_packed_decode_attention` meanwhile."""
    config = model.config
    previous = config._attn_implementation
    if previous != "sdpa":
        return step(**inputs)
    config._attn_implementation = _packed_decode_attention_name()
    try:
        return step(**inputs)
    finally:
        config._attn_implementation = previous


@functools.cache
def _packed_decode_attention_name() -> str:
    """Registers :func:`_packed_decode_attention` with transformers (once: a compiled step guards on its identity)."""
    transformers = require("transformers", "llm", "the hf policy")
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    # bound here, not imported in the traced function: an import there would break the compiled graph; the
    # function is looked up in the module at each call, so a profiler that swaps it in sees these calls too
    functional = require("torch", "llm", "the hf policy").nn.functional
    name = "agentgym_packed_decode"
    transformers.AttentionInterface.register(
        name, functools.partial(_packed_decode_attention, functional=functional, other_queries=sdpa_attention_forward))
    return name


def _packed_decode_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *, functional: Any,
                             other_queries: Any, scaling: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers' ``sdpa`` attention, with a one-token query's heads grouped by the key-value head they share.

    Eager, transformers passes the query's heads as they are with ``enable_gqa=True``, a slow path of
    the CPU kernel in bfloat16; under ``torch.compile`` its ``sdpa``
    copies every key and value once per query head that shares it (``repeat_kv``): a copy of
    the whole cache per layer and step, which the static layout's full-width keys make the
    larger part of a compiled step (on the tiny model, whose 4 query heads share 2 key-value
    heads, at batch 32 and 486 -> 751 columns: 2.7 -> 6.0 CPU-ms per step copied, 1.3 -> 1.9
    grouped).
    """
    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1:  # a prompt, or no shared heads: transformers' own sdpa
        return other_queries(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    rows, heads, _, dim = query.shape
    grouped = query.reshape(rows, heads // groups, groups, dim)
    out = functional.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(rows, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def _cut(prefix: _Prefix, length: int) -> _Prefix:
    """The first ``length`` tokens of ``prefix`` (views of its keys, values and hidden states)."""
    return _Prefix(prefix.ids[:length], [(k[:, :length], v[:, :length]) for k, v in prefix.kv],
                   prefix.hidden[:length] if prefix.hidden is not None else None)


def _shared_lengths(prompts: Sequence[Sequence[int]]) -> list[int]:
    """Per prompt, its longest common prefix with any other prompt, one token short of the prompt at most.

    The longest one is with a neighbour in sorted order, so sorting once finds every prompt's.

    Example:
        >>> _shared_lengths([[1, 2, 3, 4], [5, 6], [1, 2, 9], [1, 2, 3, 4]])
        [3, 0, 2, 3]
    """
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    lengths = [0] * len(prompts)
    for a, b in zip(order, order[1:]):
        common = _common_prefix(prompts[a], prompts[b])
        lengths[a], lengths[b] = max(lengths[a], common), max(lengths[b], common)
    return [min(length, len(prompt) - 1) for length, prompt in zip(lengths, prompts)]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def _sample(torch: Any, logits: Any, uniform: Any, sampling: Sampling) -> tuple[Any, Any]:
    """Next token and its log-probability per row: greedy at temperature 0, else temperature + top-p.

    ``uniform`` (``[rows, vocab]``, from :class:`_UniformDraws`; unused at temperature 0) is each
    row's draw for this token.
    """
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
    gumbel = -torch.log(-torch.log(uniform.clamp_(1e-20, 1.0)))
    tokens = (logp + gumbel).argmax(-1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


class _UniformDraws:
    """Each row's uniform draws for its next tokens, taken from its own seeded generator a block of tokens at a time.

    ``torch.rand((n, vocab), generator=g)`` yields the same numbers as ``n`` calls of
    ``torch.rand(vocab, generator=g)``, so drawing ahead changes no reply; it turns one small
    random call per row per token (a per-row cost that batching cannot share) into one per row
    per block.  A block holds at most :data:`_DRAWS_PER_ROW` numbers, so a large vocabulary
    draws one token at a time, as before.
    """

    def __init__(self, torch: Any, seeds: Sequence[int], device: Any, max_tokens: int, vocab: int) -> None:
        self.torch, self.device, self.vocab = torch, device, vocab
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        self.block = max(1, min(max_tokens, _DRAWS_PER_ROW // max(vocab, 1)))
        self.drawn: Any = None  # [rows, block, vocab]
        self.used = self.block  # tokens of the current block taken (a full block: draw the next)

    def next(self, rows: Sequence[int]) -> Any:
        """The draws ``[len(rows), vocab]`` for the next token of the batch rows ``rows`` (original row indices)."""
        if self.used == self.block:
            # every row draws its block, finished ones too: a row's numbers never depend on the others
            self.drawn = self.torch.stack([self.torch.rand((self.block, self.vocab), generator=g, device=self.device)
                                           for g in self.generators])
            self.used = 0
        self.used += 1
        return self.drawn[list(rows), self.used - 1]


#: Most uniform numbers drawn ahead per row (1 MiB of float32): a whole reply of a small vocabulary.
_DRAWS_PER_ROW = 2**18


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
