"""What the agent sees, rendered once: for the same env state every path gives the model the same text.

The paths: the evaluator's ``LLMPolicy`` (the budget shown by the policy, or by the env, or by
both), the trainer's policy and training env, and the adapters (TRL, verifiers, SkyRL, OpenEnv).
Each test plays the same KeyDoor episode (seed 0, hall ``red-blue``, budget 3) and compares the
system message and every turn's user message.  Where a library frames a turn its own way, the
test names it: TRL appends the first message to the dataset's last user message and returns later
ones as tool results (the text is the same; the role is TRL's), and an adapter's library may
go on after the episode's end, where the message says how it ended (the policy path never shows
an end).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence

import pytest

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.integrations.session import BudgetSession, format_turn
from agentgym_budget.policies.chat import Completion, Message, Sampling
from agentgym_budget.policies.factories import with_few_shot
from agentgym_budget.policies.llm import LLMPolicy
from agentgym_budget.policies.prompting import SYSTEM_PROMPT, system_message, turn_message

ENV_ID, BUDGET, SEED, OPTIONS = "KeyDoor-Budget-v0", 3, 0, {"task": "red-blue"}
COMMANDS = ("take key", "look")  # two turns that leave the episode running (budget 3)

EXPECTED_FIRST = ("Observation: You are in a hall",
                  "[Turns left: 3 of 3]\nAvailable commands: take key, open red door, open blue door")


class RecordingBackend:
    """Replies with the next scripted command and keeps every conversation it was asked to continue."""

    name = "recording"

    def __init__(self, commands: Sequence[str]) -> None:
        self.commands, self.seen = list(commands), []

    def complete(self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int],
                 sampling: Sampling, **_: object) -> list[Completion]:
        replies = []
        for conversation in conversations:
            turn = len(self.seen)
            self.seen.append(list(conversation))
            replies.append(Completion(f"Action: {self.commands[turn] if turn < len(self.commands) else 'look'}"))
        return replies


def policy_conversations(policy: LLMPolicy, env_show_budget: bool, **env_kwargs: object) -> list[list[Message]]:
    """The conversation the policy sends its backend at each turn of the scripted episode."""
    backend = RecordingBackend(COMMANDS)
    policy.backend = backend
    env = make_budget_env(ENV_ID, BUDGET, show_budget=env_show_budget, **env_kwargs)
    obs, info = env.reset(seed=SEED, options=OPTIONS)
    state = policy.start(SEED)
    for _ in COMMANDS:
        [reply] = policy.act_batch([state], [obs], [info])
        obs, _, terminated, truncated, info = env.step(reply.action)
        assert not (terminated or truncated)
    policy.act_batch([state], [obs], [info])
    return backend.seen


def user_messages(conversation: Sequence[Message]) -> list[str]:
    return [m["content"] for m in conversation if m["role"] == "user"]


def session_messages() -> tuple[str, list[str]]:
    """The task and each turn's message of the adapters' shared session (env shows the budget)."""
    session = BudgetSession(ENV_ID, BUDGET, show_budget=True)
    session.reset(seed=SEED, options=OPTIONS)
    messages = [format_turn(session)]
    for command in COMMANDS:
        session.step(command)
        messages.append(format_turn(session))
    return str(session.info["task"]), messages


@pytest.fixture(scope="module")
def reference() -> list[list[Message]]:
    """The evaluator's path: an ``LLMPolicy`` that shows the budget itself, on an env that does not."""
    return policy_conversations(LLMPolicy(RecordingBackend(()), show_budget=True), env_show_budget=False)


def test_the_first_message_reads_as_documented(reference):
    first = user_messages(reference[0])[-1]
    assert first.startswith(EXPECTED_FIRST[0]) and first.endswith(EXPECTED_FIRST[1])
    assert first.count("Turns left") == 1
    assert reference[0][0] == system_message(reference[0][0]["content"].split("Your task is to: ")[1])


@pytest.mark.parametrize("env_shows, policy_shows", [(True, False), (True, True)])
def test_budget_shown_by_env_or_policy_or_both_reads_the_same(reference, env_shows, policy_shows):
    conversations = policy_conversations(LLMPolicy(RecordingBackend(()), show_budget=policy_shows),
                                         env_show_budget=env_shows)
    assert conversations == reference  # every turn: one budget line, in the same place


@pytest.mark.parametrize("history", ["actions", "append"])
def test_history_modes_share_the_latest_message(reference, history):
    conversations = policy_conversations(LLMPolicy(RecordingBackend(()), show_budget=True, history=history),
                                         env_show_budget=False)
    assert [c[-1] for c in conversations] == [c[-1] for c in reference]
    assert [c[0] for c in conversations] == [c[0] for c in reference]


def test_budget_template_is_the_one_place_the_wording_is_set():
    template = "You have {turns_left} of {budget} turns."
    by_policy = policy_conversations(LLMPolicy(RecordingBackend(()), show_budget=True), env_show_budget=False,
                                     budget_template=template)
    by_env = policy_conversations(LLMPolicy(RecordingBackend(()), show_budget=True), env_show_budget=True,
                                  budget_template=template)
    assert by_policy == by_env
    assert "You have 3 of 3 turns." in by_policy[0][-1]["content"] and "Turns left" not in by_policy[0][-1]["content"]


def test_a_prefix_budget_stays_first_and_once():
    env = make_budget_env(ENV_ID, BUDGET, show_budget=True, budget_position="prefix")
    obs, info = env.reset(seed=SEED, options=OPTIONS)
    message = turn_message(obs, info, show_budget=True)
    assert message.startswith("[Turns left: 3 of 3]\nObservation: You are in a hall")
    assert message.count("Turns left") == 1


def test_the_trainer_renders_what_the_evaluator_renders(reference):
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    from agentgym_budget.train.config import TrainConfig
    from agentgym_budget.train.rollout import make_train_env, training_policy

    config = TrainConfig(env_id=ENV_ID, budget=str(BUDGET), show_budget=True, history="actions")
    env = make_train_env(config)
    assert env.show_budget
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    policy = training_policy(model, tokenizer, config)
    conversations = policy_conversations(policy, env_show_budget=True)
    assert [c[-1] for c in conversations] == [c[-1] for c in reference]
    assert conversations[0][0] == reference[0][0]


def test_every_adapter_turn_is_the_policy_turn(reference):
    task, messages = session_messages()
    assert messages == [c[-1]["content"] for c in reference]
    assert system_message(task) == reference[0][0]


def test_trl_reset_and_act_return_the_policy_turn(reference):
    pytest.importorskip("trl")
    from agentgym_budget.integrations.trl_env import environment_factory

    env = environment_factory(ENV_ID, budget=BUDGET, show_budget=True)()
    texts = [env.reset(seed=SEED, options=OPTIONS)] + [env.act(command) for command in COMMANDS]
    assert texts == [c[-1]["content"] for c in reference]


def test_verifiers_prompt_is_the_policy_conversation(reference):
    pytest.importorskip("verifiers")
    from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv

    env = BudgetMultiTurnEnv(ENV_ID, budget=BUDGET, num_examples=1, first_seed=SEED, env_kwargs={"show_budget": True})
    state = {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": ""}],
             "info": {"seed": SEED, "options": OPTIONS}}
    state = asyncio.run(env.setup_state(state))
    assert [_plain(m) for m in state["prompt"]] == reference[0]


def test_skyrl_prompt_is_the_policy_conversation(reference):
    if importlib.util.find_spec("skyrl_gym") is None:
        pytest.skip("skyrl-gym is not installed: pip install -e '.[skyrl]'")
    from agentgym_budget.integrations.skyrl import SkyRLBudgetEnv

    env = SkyRLBudgetEnv({"budget": BUDGET, "show_budget": True}, {"seed": SEED, "options": OPTIONS}, env_id=ENV_ID)
    prompt, _ = env.init([])
    observations = [env.step(f"Action: {command}")["observations"][0]["content"] for command in COMMANDS]
    assert prompt == reference[0]
    assert [prompt[-1]["content"], *observations] == [c[-1]["content"] for c in reference]


FEW_SHOT = {"few_shot_env": "KeyDoor-v0", "few_shot_seed": 1, "few_shot_candidates": 3}


@pytest.fixture(scope="module")
def few_shot_reference() -> list[list[Message]]:
    """The evaluator's few-shot conversations (``eval --policy-arg few_shot_env=KeyDoor-v0 ...``)."""
    policy = with_few_shot(LLMPolicy(RecordingBackend(()), show_budget=True), *FEW_SHOT.values())
    return policy_conversations(policy, env_show_budget=False)


def test_the_few_shot_reference_shows_the_example_first(few_shot_reference, reference):
    first = few_shot_reference[0]
    assert first[0] == reference[0][0] and [m["role"] for m in first[1:3]] == ["user", "assistant"]
    assert first[-1]["content"].startswith("Your task is to: ") and first[-1]["content"].endswith(
        reference[0][-1]["content"])


def test_verifiers_few_shot_prompt_is_the_policy_conversation(few_shot_reference):
    pytest.importorskip("verifiers")
    from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv

    env = BudgetMultiTurnEnv(ENV_ID, budget=BUDGET, num_examples=1, first_seed=SEED, env_kwargs={"show_budget": True},
                             **FEW_SHOT)
    state = {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": ""}],
             "info": {"seed": SEED, "options": OPTIONS}}
    state = asyncio.run(env.setup_state(state))
    assert [_plain(m) for m in state["prompt"]] == few_shot_reference[0]
    for command, conversation in zip(COMMANDS, few_shot_reference[1:]):
        reply = [{"role": "assistant", "content": f"Action: {command}"}]
        [response] = asyncio.run(env.env_response(reply, state))
        assert _plain(response) == conversation[-1]


def test_skyrl_few_shot_prompt_is_the_policy_conversation(few_shot_reference):
    if importlib.util.find_spec("skyrl_gym") is None:
        pytest.skip("skyrl-gym is not installed: pip install -e '.[skyrl]'")
    from agentgym_budget.integrations.skyrl import SkyRLBudgetEnv

    env = SkyRLBudgetEnv({"budget": BUDGET, "show_budget": True, **FEW_SHOT}, {"seed": SEED, "options": OPTIONS},
                         env_id=ENV_ID)
    prompt, _ = env.init([])
    observations = [env.step(f"Action: {command}")["observations"][0] for command in COMMANDS]
    assert prompt == few_shot_reference[0]
    assert observations == [c[-1] for c in few_shot_reference[1:]]


def test_a_bad_few_shot_env_is_a_one_line_error_in_the_adapters():
    if importlib.util.find_spec("skyrl_gym") is None:
        pytest.skip("skyrl-gym is not installed: pip install -e '.[skyrl]'")
    from agentgym_budget.integrations.skyrl import SkyRLBudgetEnv

    with pytest.raises(ValueError, match="without a budget") as error:
        SkyRLBudgetEnv({"budget": BUDGET, "few_shot_env": ENV_ID}, {"seed": SEED}, env_id=ENV_ID)
    assert "\n" not in str(error.value)


def test_openenv_observation_carries_the_policy_turn(reference):
    pytest.importorskip("agentgym_budget.integrations.openenv_env", reason="needs openenv 0.10 (the openenv extra)", exc_type=ImportError)
    from agentgym_budget.integrations.openenv_env import BudgetEnvironment, TextAction

    env = BudgetEnvironment(ENV_ID, budget=BUDGET, show_budget=True)
    messages = [env.reset(seed=SEED, **OPTIONS).message]
    messages += [env.step(TextAction(command=command)).message for command in COMMANDS]
    assert messages == [c[-1]["content"] for c in reference]


def test_an_ended_episode_says_how_it_ended():
    session = BudgetSession(ENV_ID, 1, show_budget=True)
    session.reset(seed=SEED, options=OPTIONS)
    session.step("look")
    text = format_turn(session)
    assert text.endswith("The episode is over: the turn budget is spent.")
    assert "Available commands" not in text and text.count("Turns left: 0 of 1") == 1


def _plain(message: object) -> dict[str, str]:
    if isinstance(message, dict):
        return {"role": message["role"], "content": message["content"]}
    return {"role": message.role, "content": message.content}
