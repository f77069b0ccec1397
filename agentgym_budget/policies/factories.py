"""The LLM policies by name: ``hf`` (a local Hugging Face causal LM) and ``openai`` (a served model).

Each builds a chat backend and an :class:`~agentgym_budget.policies.llm.LLMPolicy` over it from
plain settings, what ``eval --policy hf --policy-arg ...`` passes; the registry
(:data:`agentgym_budget.episodes.policy.POLICIES`) names them.  A setting that needs episodes to
be played is resolved here, above the policy: ``model="tiny"`` trains the tiny model's tokenizer on
played text (:mod:`agentgym_budget.policies.tiny_model`) and ``few_shot_env`` plays the worked
example (:mod:`agentgym_budget.policies.few_shot`), both rendered by an ``LLMPolicy``.

Example (the tiny offline model, untrained, so its commands are arbitrary):
    >>> policy = make_hf_policy(model="tiny", tiny_env="KeyDoor-v0", max_new_tokens=8)
    >>> state = policy.start(seed=0)
    >>> info = {"task": "open the door", "admissible_commands": ["take key", "open door"]}
    >>> [reply] = policy.act_batch([state], ["You see a key."], [info])
    >>> isinstance(reply.action, str), reply.completion_tokens <= 8, len(state.history)
    (True, True, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym_budget.policies.chat import Sampling
from agentgym_budget.policies.few_shot import few_shot_examples
from agentgym_budget.policies.llm import LLMPolicy

__all__ = ["make_hf_policy", "make_openai_policy", "with_few_shot"]


def with_few_shot(policy: LLMPolicy, few_shot_env: str | None, few_shot_seed: int = 0,
                  few_shot_candidates: int = 1) -> LLMPolicy:
    """``policy`` showing the worked example of ``few_shot_env`` (``None``: zero-shot), listed commands as it lists them.

    Example:
        >>> from types import SimpleNamespace
        >>> policy = with_few_shot(LLMPolicy(SimpleNamespace(name="none")), "KeyDoor-v0")
        >>> [turn[1] for turn in policy.examples[0][1]]
        ['Action: take key', 'Action: open yellow door']
    """
    policy.examples = few_shot_examples(few_shot_env, few_shot_seed, few_shot_candidates,
                                        list_commands=policy.list_admissible)
    return policy


def _sampling(temperature: float, top_p: float, max_new_tokens: int, stop: Sequence[str] | str | None) -> Sampling:
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    return Sampling(temperature=float(temperature), top_p=float(top_p), max_new_tokens=int(max_new_tokens), stop=stops)


def make_hf_policy(model: Any = "tiny", tokenizer: Any = None, *, temperature: float = 0.7, top_p: float = 1.0,
                   max_new_tokens: int = 48, stop: Sequence[str] | str | None = None, max_prompt_tokens: int = 2048,
                   device: str | None = None, tiny_env: str = "ALFWorld-v0", model_kwargs: dict[str, Any] | None = None,
                   compile: bool = False, decode_attention: str = "auto", few_shot_env: str | None = None,
                   few_shot_seed: int = 0, few_shot_candidates: int = 1, **options: Any) -> LLMPolicy:
    """The ``hf`` policy: a local causal LM (``model``: a loaded model, a path/hub name, ``"tiny"`` or ``"smollm2"``).

    ``"tiny"`` builds the offline tiny model with a tokenizer trained on ``tiny_env``'s text;
    ``"smollm2"`` loads SmolLM2-135M-Instruct (extra ``smollm2``; :mod:`agentgym_budget.policies.smollm2`).
    ``compile``: the decode step through ``torch.compile``; ``decode_attention``: ``"auto"``, ``"grouped"`` or
    ``"transformers"`` (both: see :class:`~agentgym_budget.policies.hf.HFChatBackend`).
    ``few_shot_env``, ``few_shot_seed``, ``few_shot_candidates``: the worked example (:func:`with_few_shot`);
    ``options`` go to :class:`LLMPolicy` (``show_budget``, ``list_admissible``, ...).
    """
    from agentgym_budget.policies.hf import HFChatBackend, load_model_and_tokenizer

    if not isinstance(compile, bool):
        raise ValueError(f"compile must be true or false, got {compile!r}")
    label = model if isinstance(model, str) else type(model).__name__
    if isinstance(model, str):
        model, tokenizer = load_model_and_tokenizer(model, tokenizer, tiny_env=tiny_env, **(model_kwargs or {}))
    elif tokenizer is None:
        raise ValueError("the hf policy needs a tokenizer with a model object (or a model path to load both from)")
    if device is not None:
        model = model.to(device)
    backend = HFChatBackend(model.eval(), tokenizer, max_prompt_tokens=max_prompt_tokens, name=f"hf({label})",
                            compile=compile, decode_attention=decode_attention)
    policy = LLMPolicy(backend, _sampling(temperature, top_p, max_new_tokens, stop), **options)
    return with_few_shot(policy, few_shot_env, few_shot_seed, few_shot_candidates)


def make_openai_policy(model: str, base_url: str | None = None, api_key: str | None = None, *,
                       temperature: float = 0.0, top_p: float = 1.0, max_new_tokens: int = 48,
                       stop: Sequence[str] | str | None = None, max_concurrency: int | None = None,
                       timeout: float = 60.0, max_retries: int = 5, cache: str | None = None,
                       cache_scope: str = "server", few_shot_env: str | None = None, few_shot_seed: int = 0,
                       few_shot_candidates: int = 1, **options: Any) -> LLMPolicy:
    """The ``openai`` policy: a served model over the OpenAI chat-completions protocol.

    Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, a hosted API) at ``base_url``;
    ``api_key`` defaults to ``$OPENAI_API_KEY``; ``cache``: a file caching replies by request;
    ``cache_scope``: ``"server"`` (replies reused from the same server only) or ``"model"`` (from
    any server of that model name, e.g. to replay a run without its server).
    ``max_concurrency``: requests in flight at most (default ``None``: every episode the
    evaluator has in flight, i.e. ``--concurrency``).  ``few_shot_*``: the worked example
    (:func:`with_few_shot`); ``options`` go to :class:`LLMPolicy`.
    """
    from agentgym_budget.policies.served import OpenAIChatBackend

    backend = OpenAIChatBackend(model, base_url=base_url, api_key=api_key, max_concurrency=max_concurrency,
                                timeout=timeout, max_retries=max_retries, cache=cache, cache_scope=cache_scope)
    policy = LLMPolicy(backend, _sampling(temperature, top_p, max_new_tokens, stop), **options)
    return with_few_shot(policy, few_shot_env, few_shot_seed, few_shot_candidates)
