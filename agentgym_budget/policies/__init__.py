"""Policies for text environments: baselines, the LLM policy and its backends, and what is made by playing episodes.

Registered names (:mod:`agentgym_budget.episodes.policy`, which holds the :class:`Policy`
protocol and the registry, re-exported here): ``random``, ``expert``, ``noisy-expert``, and the
LLM policies ``hf`` (a local Hugging Face causal LM; torch/transformers are imported only when it
is built) and ``openai`` (a served model over the OpenAI chat-completions protocol), both
:class:`~agentgym_budget.policies.llm.LLMPolicy` over a chat backend
(:mod:`~agentgym_budget.policies.factories`).  Demonstrations, the few-shot examples and the tiny
model's tokenizer are played through the episode runner, a layer below.
"""

from agentgym_budget.episodes.policy import (
    POLICIES,
    BatchPolicy,
    Policy,
    PolicyReply,
    as_batch_policy,
    make_policy,
    policy_names,
    register_policy,
)
from agentgym_budget.policies.baselines import ExpertPolicy, NoisyExpertPolicy, RandomPolicy
from agentgym_budget.policies.factories import make_hf_policy, make_openai_policy
from agentgym_budget.policies.llm import LLMPolicy
from agentgym_budget.policies.prompting import build_messages, parse_action

__all__ = [
    "POLICIES",
    "BatchPolicy",
    "ExpertPolicy",
    "LLMPolicy",
    "NoisyExpertPolicy",
    "Policy",
    "PolicyReply",
    "RandomPolicy",
    "as_batch_policy",
    "build_messages",
    "make_hf_policy",
    "make_openai_policy",
    "make_policy",
    "parse_action",
    "policy_names",
    "register_policy",
]
