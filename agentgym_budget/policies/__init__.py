"""Policies for text environments: the :class:`Policy` protocol, a registry by name, baselines.

Registered names: ``random``, ``expert``, ``noisy-expert`` and ``hf`` (a Hugging Face causal
LM; torch/transformers are imported only when it is built).
"""

from agentgym_budget.policies.base import (
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
from agentgym_budget.policies.prompting import build_prompt, parse_action


def _make_hf(*args, **kwargs):  # registered lazily so that importing policies stays light
    from agentgym_budget.policies.hf import HFPolicy

    return HFPolicy(*args, **kwargs)


POLICIES.setdefault("hf", _make_hf)

__all__ = [
    "POLICIES",
    "BatchPolicy",
    "ExpertPolicy",
    "NoisyExpertPolicy",
    "Policy",
    "PolicyReply",
    "RandomPolicy",
    "as_batch_policy",
    "build_prompt",
    "make_policy",
    "parse_action",
    "policy_names",
    "register_policy",
]
