"""Fuzzing every registered env with hostile action strings: no exception, no hang, state intact.

Each env id runs in its own child process (one per id, reused by the whole module: TextWorld and
ScienceWorld take seconds to start), so that a hang fails the test after a wall-clock bound
instead of hanging the suite: the child is killed and the test names the actions it was given.
Hypothesis draws the actions in this process: backslashes (TextWorld's interpreter escapes),
control characters, lone surrogates, LaTeX, markdown, JSON, shell metacharacters, mixed with
valid commands; fixed examples add 1 MB strings.  After the fuzzing, the expert still wins.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.envs.registration import FAMILIES

#: Longest one step may take (a 1 MB string on ScienceWorld: ~0.6 s on an idle core).
STEP_SECONDS = 10.0
#: Longest a child may take to build its env (ScienceWorld starts a JVM).
START_SECONDS = 180.0
EXPERT_TURNS = 200

NASTY = [
    "\\g", "\\q", "  \\help", "\\x", "\\", "\\boxed{go east}", "$\\frac{1}{2}$", "\\begin{align}x\\end{align}",
    "\x00", "\x07\x08\x1b[31m", "\r\n\t", "\ud800", "look\udfff", "\udc80\ud800x", "\u2028\u2029", "\ufeff",
    "**take** `key`", "# go north\n- open door", "```python\nimport os\n```", '{"action": "look"}', "[1, 2, {}]",
    "$(rm -rf /)", "`reboot`", "; ls | cat && echo $HOME > /dev/null", "'; DROP TABLE t; --", "%s%n%x", "{0}",
    "look", "inventory", "go north", "take all", "open door", "", " ", "١٠", "🙂" * 50, "a" * 5000,
]  # fmt: skip
HUGE = ["a" * 1_000_000, "\\" * 1_000_000, "\ud800" * 100_000 + "look", ("go east. " * 120_000)[:1_000_000]]

# Any code point (surrogates included), or the nasty pieces glued to text.
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
ACTION = st.one_of(
    st.sampled_from(NASTY),
    st.text(ANY_CHAR, max_size=40),
    st.builds(lambda a, b, c: a + b + c, st.sampled_from(NASTY), st.text(ANY_CHAR, max_size=10), st.sampled_from(NASTY)),
)


def _env_ids() -> list:
    params = []
    for family in FAMILIES:
        marks = [] if family.installed else [pytest.mark.skip(reason=f"needs the {family.extra!r} extra")]
        params.append(pytest.param(family.ids[1], marks=marks, id=family.ids[1]))
    return params


def _child(conn, env_id: str) -> None:
    """The child's loop: ('fuzz', actions) -> per-step (error or None, seconds); ('expert', None) -> won."""
    import gymnasium as gym  # the envs are registered: this module imported agentgym_budget

    try:
        env = gym.make(env_id, budget=100_000)
        env.reset(seed=0)
        conn.send(("ready", None))
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    info: dict = {}
    while True:
        command, payload = conn.recv()
        if command == "fuzz":
            results = []
            for action in payload:
                start = time.perf_counter()
                try:
                    obs, reward, terminated, truncated, info = env.step(action)
                    error = None if isinstance(obs, str) and env.observation_space.contains(obs) else "bad observation"
                    if terminated or truncated:
                        env.reset(seed=0)
                except Exception as e:  # noqa: BLE001  (reported to the parent, which fails the test)
                    error = f"{type(e).__name__}: {e}"
                results.append((error, time.perf_counter() - start))
            conn.send(("done", results))
        elif command == "not-a-string":
            try:
                env.step(5)
                conn.send(("done", "no error"))
            except TypeError:
                conn.send(("done", "TypeError"))
            except Exception as e:  # noqa: BLE001
                conn.send(("done", type(e).__name__))
        elif command == "expert":  # from the current state if the expert still has a plan, else a fresh episode
            if not info.get("expert_action"):
                _, info = env.reset(seed=0)
            won = False
            for _ in range(EXPERT_TURNS):
                _, _, terminated, truncated, info = env.step(info["expert_action"] or "look")
                if terminated or truncated:
                    won = bool(info.get("won"))
                    break
            env.reset(seed=0)
            info = {}
            conn.send(("done", won))
        else:
            env.close()
            conn.send(("done", None))
            return


class EnvChild:
    """One env in a child process; every call waits a bounded time, then kills the child and fails."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self._conn, child_conn = multiprocessing.Pipe()
        self._process = multiprocessing.get_context("fork").Process(target=_child, args=(child_conn, env_id),
                                                                    daemon=True)
        self._process.start()
        kind, payload = self._call(None, START_SECONDS, "starting the env")
        if kind == "error":
            pytest.fail(f"{env_id} could not be built:\n{payload}")

    def _call(self, message, timeout: float, what: str):
        if message is not None:
            self._conn.send(message)
        if not self._conn.poll(timeout):
            self._process.kill()
            pytest.fail(f"{self.env_id} hung: no answer within {timeout:.0f} s while {what}")
        return self._conn.recv()

    def fuzz(self, actions: list[str]) -> list[tuple[str | None, float]]:
        shown = [a[:40] for a in actions]
        return self._call(("fuzz", actions), STEP_SECONDS * len(actions) + 10, f"stepping {shown!r}")[1]

    def command(self, name: str, timeout: float = STEP_SECONDS * EXPERT_TURNS):
        return self._call((name, None), timeout, name)[1]

    def close(self) -> None:
        if self._process.is_alive():
            try:
                self._call(("close", None), 30, "closing")
            finally:
                self._process.join(timeout=5)
                if self._process.is_alive():
                    self._process.kill()


@pytest.fixture(scope="module")
def children():
    made: dict[str, EnvChild] = {}
    yield made
    for child in made.values():
        child.close()


def _child_for(children: dict, env_id: str) -> EnvChild:
    if env_id not in children:
        children[env_id] = EnvChild(env_id)
    return children[env_id]


def _check(env_id: str, actions: list[str], results) -> None:
    for action, (error, seconds) in zip(actions, results):
        assert error is None, f"{env_id}.step({action[:60]!r}) raised {error}"
        assert seconds < STEP_SECONDS, f"{env_id}.step({action[:60]!r}) took {seconds:.1f} s"


@pytest.mark.slow  # TextWorld and ScienceWorld start slowly; the KeyDoor/ALFWorld ids take seconds
@pytest.mark.parametrize("env_id", _env_ids())
def test_hostile_actions_never_raise_never_hang_and_leave_the_env_playable(children, env_id):
    child = _child_for(children, env_id)

    @settings(max_examples=12, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(ACTION, min_size=1, max_size=4))
    def fuzz(actions):
        _check(env_id, actions, child.fuzz(actions))

    fuzz()
    for batch in [NASTY[i:i + 4] for i in range(0, len(NASTY), 4)] + [[huge] for huge in HUGE]:
        _check(env_id, batch, child.fuzz(batch))  # small batches: a hang is found within ~50 s
    assert child.command("not-a-string", timeout=60) == "TypeError"  # the one documented exception
    assert child.command("expert") is True, f"{env_id}: the expert no longer wins after the fuzzing"
