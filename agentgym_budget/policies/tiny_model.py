"""The tiny offline model: a Qwen2-architecture LM and a chat tokenizer trained on an env's text.

For tests, CI, smoke runs and CPU learning checks: no hub download, built in about a second.
The tokenizer is byte-level BPE (any text encodes) with merges learnt from the conversations
that :func:`~agentgym_budget.policies.prompting.build_messages` writes for episodes of the env
(random and expert play), so the env's stock phrases are a token or two each.  It has no chat
template: the LLM layer writes its conversations as one ReAct text
(:func:`~agentgym_budget.policies.prompting.render_plain`), the format of the trainer's
earlier runs.  ChatML's ``<|im_start|>``/``<|im_end|>`` are in its vocabulary, so a server
that applies ChatML itself (llama.cpp's ``--chat_format chatml``) tokenises them as one token
each.  Replies end with ``<|im_end|>``.  The model is a randomly initialised 2-layer ``Qwen2ForCausalLM``
— the architecture of Qwen2.5, at toy size.  It is what ``--policy hf --policy-arg model=tiny``
and the trainer's ``--model tiny`` build; ``train.warmup.format_warmup`` teaches it the reply
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

import gymnasium as gym
import numpy as np

from agentgym_budget._optional import require
from agentgym_budget.policies.chat import Message
from agentgym_budget.policies.prompting import SYSTEM_PROMPT, build_messages, render_plain

__all__ = [
    "END_OF_TURN",
    "PAD_TOKEN",
    "build_tokenizer",
    "env_corpus",
    "random_play_samples",
    "reply_text",
    "tiny_model",
    "tiny_model_and_tokenizer",
]

PAD_TOKEN = "<|endoftext|>"
START_OF_TURN = "<|im_start|>"
END_OF_TURN = "<|im_end|>"  # the end-of-sequence token of a reply

def reply_text(action: str) -> str:
    """The reply format the tiny model is warmed up to (it follows the prompt's ``Thought:``)."""
    return f" I should {action}.\nAction: {action}"


def random_play_samples(
    env_id: str, episodes: int, seed: int = 0, max_turns: int = 8, expert_every: int = 0
) -> list[tuple[list[Message], str]]:
    """``(messages, reply)`` pairs from playing ``env_id`` with uniformly random admissible commands.

    The messages are what the trainer's LLM policy shows the model at that turn (admissible
    commands listed, earlier turns as ``Action: <command>``).  With ``expert_every=n > 0`` every n-th
    episode follows the expert instead (for tokenizer text only: the warm-up uses random play,
    which carries no knowledge of the task).
    """
    import agentgym_budget  # noqa: F401  (registers the ids)

    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    pairs = []
    for episode in range(episodes):
        obs, info = env.reset(seed=seed + episode)
        history: list[tuple[str, str | None]] = []
        for _ in range(max_turns):
            admissible = list(info["admissible_commands"])
            use_expert = expert_every and episode % expert_every == 0 and "expert_action" in info
            action = info["expert_action"] if use_expert else str(rng.choice(admissible))
            messages = build_messages(info["task"], [*history, (obs, None)], admissible=admissible)
            pairs.append((messages, reply_text(action)))
            history.append((obs, f"Action: {action}"))  # as the trainer's policy shows earlier turns
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    env.close()
    return pairs


def env_corpus(env_id: str, episodes: int = 40, seed: int = 0) -> list[str]:
    """Text to learn the tokenizer from: the messages and replies of random and expert play."""
    pairs = random_play_samples(env_id, episodes, seed=seed, expert_every=2)
    # whole prompts as the model will see them, so that merges span the prompt's stock phrases
    return [SYSTEM_PROMPT] + [text for messages, reply in pairs for text in (render_plain(messages), reply)]


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
