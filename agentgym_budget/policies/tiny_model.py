"""The tiny offline model: a Qwen2-architecture LM and a chat tokenizer trained on an env's text.

For tests, CI, smoke runs and CPU learning checks: no hub download, built in about a second.
The tokenizer is byte-level BPE (any text encodes) with merges learnt from the conversations
the LLM policy renders for episodes of the env's training split (random and expert play,
:func:`env_corpus`), so the env's stock phrases are a token or two each.  It has no chat
template: the LLM layer writes its conversations as one ReAct text
(:func:`~agentgym_budget.policies.prompting.render_plain`), the format of the trainer's
earlier runs.  ChatML's ``<|im_start|>``/``<|im_end|>`` are in its vocabulary, so a server
that applies ChatML itself (llama.cpp's ``--chat_format chatml``) tokenises them as one token
each.  Replies end with ``<|im_end|>``.  The model is a randomly initialised 2-layer ``Qwen2ForCausalLM``
— the architecture of Qwen2.5, at toy size.  It is what ``--policy hf --policy-arg model=tiny``
and the trainer's ``--model tiny`` build; ``train.sft.format_warmup`` teaches it the reply
format.

Example:
    >>> from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    >>> model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    >>> tokenizer.decode(tokenizer("Action: take key")["input_ids"])
    'Action: take key'
    >>> tokenizer.chat_template is None, tokenizer.eos_token
    (True, '<|im_end|>')
    >>> model.config.num_hidden_layers, model.config.vocab_size == len(tokenizer)
    (2, True)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.policies.demonstrations import play_demonstrations, training_env_kwargs
from agentgym_budget.policies.prompting import SYSTEM_PROMPT, render_plain

__all__ = [
    "END_OF_TURN",
    "PAD_TOKEN",
    "build_tokenizer",
    "env_corpus",
    "tiny_model",
    "tiny_model_and_tokenizer",
]

PAD_TOKEN = "<|endoftext|>"
START_OF_TURN = "<|im_start|>"
END_OF_TURN = "<|im_end|>"  # the end-of-sequence token of a reply

def env_corpus(env_id: str, episodes: int = 40, seed: int = 0, max_turns: int = 8) -> list[str]:
    """Text to learn the tokenizer from: the prompts and replies of random and expert play on the training split.

    :func:`~agentgym_budget.policies.demonstrations.play_demonstrations` plays the episodes (half
    random, half expert where the env has one) on ``env_id``'s training split
    (:func:`~agentgym_budget.policies.demonstrations.training_env_kwargs`: KeyDoor's held-out door
    pairs never appear) under a budget of ``max_turns``, rendered by the LLM policy the trainer uses
    (earlier turns as ``Action: <command>``, admissible commands listed).
    """
    kwargs = training_env_kwargs(env_id)
    options = {"history": "actions"}

    def make() -> Any:
        return make_budget_env(env_id, max_turns, **kwargs)

    played = play_demonstrations(make, "random", episodes - episodes // 2, seed, policy_options=options)
    try:
        played += play_demonstrations(make, "expert", episodes // 2, seed + episodes, policy_options=options)
    except ValueError:  # no expert in this env: random play only
        played += play_demonstrations(make, "random", episodes // 2, seed + episodes, policy_options=options)
    turns = [turn for episode in played for turn in episode]
    # whole prompts as the model will see them, so that merges span the prompt's stock phrases
    return [SYSTEM_PROMPT] + [text for turn in turns for text in (render_plain(turn.messages), turn.reply)]


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 512, max_token_length: int = 12) -> Any:
    """A byte-level BPE chat tokenizer with ``vocab_size`` entries learnt from ``corpus``.

    Merges may span spaces (no word pre-split) up to ``max_token_length`` characters, so the
    env's stock phrases are a token or two and a KeyDoor turn is a few dozen tokens — short
    sequences are what make CPU training fast — while a reply stays several tokens.
    """
    tokenizers = require("tokenizers", "llm", "the tiny model")
    transformers = require("transformers", "llm", "the tiny model")
    backend = tokenizers.Tokenizer(tokenizers.models.BPE())
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[PAD_TOKEN, START_OF_TURN, END_OF_TURN],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), max_token_length=max_token_length,
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=END_OF_TURN, pad_token=PAD_TOKEN,
        additional_special_tokens=[START_OF_TURN],
    )
    return tokenizer


def tiny_model(tokenizer: Any, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, seed: int = 0) -> Any:
    """A randomly initialised ``Qwen2ForCausalLM`` sized for ``tokenizer`` (tied embeddings)."""
    torch = require("torch", "llm", "the tiny model")
    transformers = require("transformers", "llm", "the tiny model")
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=max(num_heads // 2, 1),
        max_position_embeddings=4096, tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    return transformers.Qwen2ForCausalLM(config).eval()


def tiny_model_and_tokenizer(env_id: str = "ALFWorld-v0", seed: int = 0, **model_kwargs: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the tokenizer trained on ``env_id``'s text, the model sized for it (deterministic)."""
    tokenizer = build_tokenizer(env_corpus(env_id, seed=seed))
    return tiny_model(tokenizer, seed=seed, **model_kwargs), tokenizer
