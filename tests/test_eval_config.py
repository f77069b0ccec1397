"""``EvalConfig``: every evaluation setting, checked once, and the source of ``agentgym-budget eval``'s flags."""

from __future__ import annotations

import dataclasses

import pytest

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.cli import _parser
from agentgym_budget.eval.config import EvalConfig
from agentgym_budget.eval.evaluate import evaluate, plan_evaluation
from agentgym_budget.flags import from_arguments

SMALL = dict(env_id="KeyDoor-Budget-v0", ks=(1, 2), ts=(2, 4), tasks=4, bootstrap=0)


def parsed(*argv: str) -> EvalConfig:
    return from_arguments(EvalConfig, _parser().parse_args(["eval", *argv]))


def test_the_eval_flags_are_the_config_fields() -> None:
    config = parsed("--env", "KeyDoor-Budget-v0", "--k", "1,2", "--t", "3", "--policy-arg", "p=0.5",
                    "--batch-size", "4", "--no-plots", "--no-transcripts", "--probes", "2")
    assert (config.env_id, config.ks, config.ts, config.policy_kwargs) == ("KeyDoor-Budget-v0", (1, 2), (3,), {"p": 0.5})
    assert (config.concurrency, config.plots, config.transcripts, config.probes) == (4, False, False, 2)
    assert config.attempts == 2 and config.out == "results"  # the command line writes files; Python: out=None
    defaults = parsed()
    assert dataclasses.replace(defaults, out=None) == EvalConfig()


@pytest.mark.parametrize(("settings", "message"), [
    (dict(tasks=0), "tasks must be an integer in 1..1,000,000, got 0"),
    (dict(workers=1000), "workers must be an integer in 1..256"),
    (dict(ks=(0, 1)), "every K must be >= 1, got 0"),
    (dict(ts=(2, 2)), "must not repeat"),
    (dict(resume=True), "resume=True needs out="),
    (dict(mode="fast"), "mode must be one of"),
    (dict(tasks=1000, bootstrap=10**6), "20 cells.*use at most bootstrap=12500$"),
    (dict(tasks=True), "tasks must be an int, got bool"),
])
def test_bad_settings_are_refused_when_the_config_is_made(settings, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        EvalConfig(**settings)


def test_evaluate_takes_a_config_or_the_keywords_that_build_one() -> None:
    config = EvalConfig(**SMALL)
    by_config, by_keywords = evaluate(config), evaluate("KeyDoor-Budget-v0", **{k: v for k, v in SMALL.items()
                                                                                if k != "env_id"})
    assert by_config.successes.tolist() == by_keywords.successes.tolist()
    assert evaluate(config, seed=1).seed == 1 and config.seed == 0  # keywords replace, the config is kept
    with pytest.raises(ValueError, match=r"unknown evaluation setting\(s\) \['task'\]"):
        plan_evaluation(config, task=3)


def test_the_ray_backend_needs_its_executor() -> None:
    with pytest.raises(ValueError, match="executor=RayExecutor"):
        evaluate(EvalConfig(**SMALL, backend="ray"))


def test_field_docs_parse_the_source_once_per_class_and_read_the_same(monkeypatch) -> None:
    import inspect

    from agentgym_budget.flags import _parsed_field_docs, field_docs

    fresh = _parsed_field_docs.__wrapped__(EvalConfig)  # the uncached parse
    assert field_docs(EvalConfig) == fresh and fresh["seed"] == "base seed (default 0)"
    calls = []
    monkeypatch.setattr(inspect, "getsource", lambda cls: calls.append(cls) or "")
    docs = field_docs(EvalConfig)
    docs.clear()  # a caller's copy: the cache keeps its own
    assert field_docs(EvalConfig) == fresh and calls == []
