"""Probe states go through the one episode loop: the outcomes do not depend on how many are in flight."""

from __future__ import annotations

import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.eval.probes import ProbeReplayError, build_probes, run_probes

KEYS = ("set_id", "agreement", "success_to_go", "effect", "source")


@pytest.mark.parametrize("env_id", ["KeyDoor-Budget-v0", "ALFWorld-Budget-v0"])
def test_probes_in_flight_together_give_the_outcomes_of_one_at_a_time(env_id):
    probes = build_probes(env_id, n=8, seed=5)
    alone = run_probes(env_id, "noisy-expert", probes, seed=5, bootstrap=20)
    together = run_probes(env_id, "noisy-expert", probes, seed=5, bootstrap=20, concurrency=4)
    assert {k: alone[k] for k in KEYS} == {k: together[k] for k in KEYS}
    assert len(alone["agreement"]) == 8


def test_a_probe_that_replays_to_another_state_is_an_error_and_concurrency_is_checked():
    probes = build_probes("KeyDoor-Budget-v0", n=2, seed=0)
    broken = [probes[0].__class__(**{**probes[0].to_dict(), "prefix": ("take key",) * 2, "digest": "0" * 12})]
    with pytest.raises(ProbeReplayError, match="replays to a different state"):
        run_probes("KeyDoor-Budget-v0", "expert", broken)
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        run_probes("KeyDoor-Budget-v0", "expert", probes, concurrency=0)
