"""The one LLM policy layer: the HF chat backend's sampler, context limit, LLMPolicy, batched evaluation."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.eval import evaluate  # noqa: E402
from agentgym_budget.eval.process_pool import ProcessPoolExecutor  # noqa: E402
from agentgym_budget.eval.records import EpisodeJob  # noqa: E402
from agentgym_budget.eval.runner import RolloutSpec, SerialExecutor  # noqa: E402
from agentgym_budget.policies import LLMPolicy, make_policy  # noqa: E402
from agentgym_budget.eval.transcripts import read_transcripts  # noqa: E402
from agentgym_budget.policies.chat import Completion, Sampling  # noqa: E402
from agentgym_budget.policies.hf import HFChatBackend, encode_conversation  # noqa: E402
from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer  # noqa: E402
from agentgym_budget.train.grpo import TurnSample, action_logprobs, collate  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer("KeyDoor-v0", seed=0)


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Observation: {text}"}]


CHATS = [chat("a red door."), chat("a key " * 30), chat("nothing")]


def test_greedy_decoding_matches_transformers_generate_with_left_padding(tiny) -> None:
    model, tokenizer = tiny
    backend = HFChatBackend(model, tokenizer)
    completions = backend.complete(CHATS, seeds=[0, 0, 0], sampling=Sampling(temperature=0, max_new_tokens=12))
    for completion in completions:  # prompts of different lengths shared one left-padded batch
        ids = torch.tensor([completion.prompt_ids])
        reference = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                                   pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        assert completion.completion_ids == reference[0, ids.shape[1]:].tolist()[: len(completion.completion_ids)]
        assert completion.completion_tokens == len(completion.completion_ids)
        assert completion.prompt_ids == encode_conversation(tokenizer, CHATS[completions.index(completion)])


def test_a_reply_depends_on_its_own_seed_not_on_the_batch(tiny) -> None:
    backend = HFChatBackend(*tiny)
    sampling = Sampling(temperature=1.0, max_new_tokens=10)
    batch = backend.complete(CHATS, seeds=[5, 6, 7], sampling=sampling)
    alone = [backend.complete([c], seeds=[s], sampling=sampling)[0] for c, s in zip(CHATS, [5, 6, 7])]
    assert [c.completion_ids for c in batch] == [c.completion_ids for c in alone]
    other_seed = backend.complete(CHATS[:1], seeds=[8], sampling=sampling)[0]
    assert other_seed.completion_ids != batch[0].completion_ids


def test_sampler_logprobs_are_what_the_trainers_loss_computes(tiny) -> None:
    model, tokenizer = tiny
    backend = HFChatBackend(model, tokenizer)
    [completion] = backend.complete(CHATS[:1], seeds=[3], sampling=Sampling(temperature=0.7, max_new_tokens=10))
    sample = TurnSample(completion.prompt_ids + completion.completion_ids, len(completion.prompt_ids), 1.0)
    logp, _ = action_logprobs(model, collate([sample], tokenizer.pad_token_id, "token-mean"), temperature=0.7)
    assert logp.tolist() == pytest.approx(completion.logprobs, abs=1e-5)


def test_the_models_generation_config_does_not_change_the_sampler(tiny) -> None:
    model, tokenizer = tiny
    backend = HFChatBackend(model, tokenizer)
    sampling = Sampling(temperature=1.0, max_new_tokens=10)
    before = backend.complete(CHATS, seeds=[1, 2, 3], sampling=sampling)
    model.generation_config.repetition_penalty, model.generation_config.top_k = 5.0, 2
    try:
        after = backend.complete(CHATS, seeds=[1, 2, 3], sampling=sampling)
    finally:
        model.generation_config.repetition_penalty, model.generation_config.top_k = 1.0, 50
    assert [c.completion_ids for c in after] == [c.completion_ids for c in before]


def test_top_p_keeps_only_the_nucleus(tiny) -> None:
    backend = HFChatBackend(*tiny)
    greedy = backend.complete(CHATS, seeds=[0, 1, 2], sampling=Sampling(temperature=0, max_new_tokens=6))
    tiny_nucleus = backend.complete(CHATS, seeds=[0, 1, 2], sampling=Sampling(temperature=1.0, top_p=1e-6,
                                                                               max_new_tokens=6))
    assert [c.completion_ids for c in tiny_nucleus] == [c.completion_ids for c in greedy]
    assert all(lp == pytest.approx(0.0, abs=1e-6) for c in tiny_nucleus for lp in c.logprobs)


def test_stop_strings_end_the_reply_before_them(tiny) -> None:
    model, tokenizer = tiny
    backend = HFChatBackend(model, tokenizer)
    free = backend.complete(CHATS[:1], seeds=[4], sampling=Sampling(temperature=1.0, max_new_tokens=24))[0]
    stop = free.text[3:5]
    assert stop.strip(), "the reply is too short for this test"
    cut = backend.complete(CHATS[:1], seeds=[4], sampling=Sampling(temperature=1.0, max_new_tokens=24, stop=(stop,)))[0]
    assert stop not in cut.text and free.text.startswith(cut.text) and len(cut.completion_ids) < len(
        free.completion_ids)


def test_context_limit_drops_the_oldest_turns_first_and_keeps_task_and_latest(tiny) -> None:
    model, tokenizer = tiny
    history = [{"role": "system", "content": "Your task is to: open the red door"}]
    for i in range(6):
        history += [{"role": "user", "content": f"Observation: observation number {i} " * 5},
                    {"role": "assistant", "content": f"Action: action {i}"}]
    history.append({"role": "user", "content": "Observation: now"})
    full = encode_conversation(tokenizer, history)
    cut = HFChatBackend(model, tokenizer, max_prompt_tokens=len(full) - 10).fit(history)
    text = tokenizer.decode(cut)
    assert len(cut) <= len(full) - 10
    assert "open the red door" in text and "observation number 0" not in text and "observation number 5" in text
    assert "Observation: now" in text
    one_turn = [{"role": "user", "content": "x " * 500}]
    assert len(HFChatBackend(model, tokenizer, max_prompt_tokens=50).fit(one_turn)) == 50


def test_llm_policy_keeps_history_shows_budget_and_replays_from_a_seed(tiny) -> None:
    policy = make_policy("hf", model=tiny[0], tokenizer=tiny[1], max_new_tokens=6, show_budget=True)
    assert isinstance(policy, LLMPolicy) and policy.reads_budget and policy.llm
    info = {"task": "open the door", "admissible_commands": ["take key", "open door"], "turns_left": 3, "budget": 5}
    state = policy.start(seed=0)
    assert "[Turns left: 3 of 5]" in policy.messages(state, "You see a key.", info)[-1]["content"]
    first = [r.action for r in policy.act_batch([state], ["You see a key."], [info])]
    first += [r.action for r in policy.act_batch([state], ["You see a door."], [info])]
    assert [m["role"] for m in policy.messages(state, "next", info)] == ["system", "user", "assistant", "user",
                                                                          "assistant", "user"]
    again = policy.start(seed=0)
    replay = [policy.act_batch([again], [o], [info])[0].action for o in ("You see a key.", "You see a door.")]
    assert replay == first
    with pytest.raises(ValueError, match="temperature"):
        make_policy("hf", model=tiny[0], tokenizer=tiny[1], temperature=-1)


class ScriptedBackend:
    """A chat backend whose reply at an episode's turn ``t`` is ``replies[t]`` (round and round)."""

    name = "scripted"

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    def complete(self, conversations, seeds, sampling) -> list[Completion]:
        turns = [sum(message["role"] == "assistant" for message in c) for c in conversations]
        return [Completion(self.replies[turn % len(self.replies)]) for turn in turns]


DOORS = {"task": "open the green door", "admissible_commands": ["open blue door", "open green door", "take key"]}


def test_a_reply_is_played_as_written_and_its_written_spelling_is_kept() -> None:
    policy = LLMPolicy(ScriptedBackend(["Action: open red door", "Action: OPEN  Green door.", "Action: opn blue door"]))
    state = policy.start(seed=0)
    replies = [policy.act_batch([state], ["A room."], [DOORS])[0] for _ in range(3)]
    assert [(r.action, r.written_action) for r in replies] == [
        ("open red door", None),  # no red door: played as written (the old closest match played "open green door")
        ("open green door", "OPEN Green door"),  # the admissible spelling, the written one kept
        ("opn blue door", None),  # exact matching fixes no typo
    ]
    fuzzy = LLMPolicy(ScriptedBackend(["Action: opn blue door", "Action: open red door"]), action_matching="fuzzy")
    state = fuzzy.start(seed=0)
    replies = [fuzzy.act_batch([state], ["A room."], [DOORS])[0] for _ in range(2)]
    assert [(r.action, r.written_action) for r in replies] == [("open blue door", "opn blue door"),
                                                                ("open red door", None)]
    with pytest.raises(ValueError, match="action matching must be one of"):
        LLMPolicy(ScriptedBackend([]), action_matching="closest")


def test_the_transcript_keeps_the_command_the_model_wrote(tmp_path) -> None:
    policy = LLMPolicy(ScriptedBackend(["Thought: the key.\nAction: Take  KEY.", "Action: open purple door"]))
    evaluate("KeyDoor-Budget-v0", policy, ks=(1,), ts=(2,), tasks=2, attempts=1, bootstrap=0, out=tmp_path)
    turns = [turn for line in read_transcripts(tmp_path).values() for turn in line["turns"]]
    assert [(t["action"], t["written_action"], t["admissible"]) for t in turns] == [
        ("take key", "Take KEY", True), ("open purple door", None, False)] * 2
    assert policy.action_matching == "exact"


def _passkt(result) -> dict:
    data = result.to_dict()
    return {key: data[key] for key in ("pass", "stderr", "ci_low", "ci_high", "successes", "metrics")}


def test_batched_evaluation_equals_the_sequential_one_for_a_deterministic_policy() -> None:
    kwargs = dict(ks=(1, 2, 4), ts=(5, 10, 20), tasks=12, attempts=4, bootstrap=200)
    one = evaluate("ALFWorld-Budget-v0", "noisy-expert", concurrency=1, **kwargs)
    many = evaluate("ALFWorld-Budget-v0", "noisy-expert", concurrency=32, **kwargs)
    assert _passkt(one) == _passkt(many) and many.config["concurrency"] == 32


@pytest.mark.slow
def test_batched_greedy_hf_evaluation_equals_batch_one(tmp_path) -> None:
    kwargs = dict(ks=(1, 2), ts=(3, 6), tasks=4, attempts=2, bootstrap=100,
                  policy_kwargs={"model": "tiny", "tiny_env": "KeyDoor-v0", "temperature": 0, "max_new_tokens": 12})
    one = evaluate("KeyDoor-Budget-v0", "hf", concurrency=1, out=tmp_path / "one", **kwargs)
    eight = evaluate("KeyDoor-Budget-v0", "hf", concurrency=8, out=tmp_path / "eight", **kwargs)
    assert _passkt(one) == _passkt(eight)
    assert one.usage["completion_tokens"] == eight.usage["completion_tokens"] > 0
    records = [json.loads(line) for line in (tmp_path / "eight" / "episodes.jsonl").read_text().splitlines()]
    assert all(r["completion_tokens"] > 0 and r["prompt_tokens"] > 0 for r in records)


def test_runner_plays_each_episode_with_its_own_env_and_policy_state() -> None:
    spec = RolloutSpec("KeyDoor-Budget-v0", "noisy-expert", seed=3, max_budget=6, policy_kwargs={"p": 0.5},
                       concurrency=5, transcripts=True)
    jobs = [EpisodeJob(task, attempt, 6) for task in range(4) for attempt in range(3)]
    batched = SerialExecutor().run(spec, jobs)
    sequential = SerialExecutor().run(RolloutSpec("KeyDoor-Budget-v0", "noisy-expert", seed=3, max_budget=6,
                                                  policy_kwargs={"p": 0.5}), jobs)
    assert batched == sequential
    assert ProcessPoolExecutor(2).run(spec, jobs) == sequential  # processes compose with episodes in flight
    record = batched[0]
    assert [turn["action"] for turn in record.transcript] == record.actions
    assert record.final_observation and "transcript" not in record.to_dict()


def test_an_api_key_is_never_recorded_and_fetching_settings_are_not_the_run_identity() -> None:
    pytest.importorskip("openai")
    from agentgym_budget.eval.evaluate import plan_evaluation

    plan = plan_evaluation("KeyDoor-Budget-v0", "openai", ks=(1,), ts=(2,), tasks=1, attempts=1, policy_kwargs={
        "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-secret", "max_concurrency": 3})
    assert "api_key" not in plan.policy_settings and "sk-secret" not in repr(plan.policy_settings)
    assert plan.policy_settings["max_concurrency"] == 3  # recorded in the result...
    assert "max_concurrency" not in plan.identity_settings  # ...but a resume may change it
    assert plan.identity_settings["model"] == "m" and plan.identity_settings["temperature"] == 0.0


def test_reusing_a_conversations_kv_cache_gives_the_replies_of_a_full_run(tiny) -> None:
    model, tokenizer = tiny
    info = {"task": "open the door", "admissible_commands": ["take key", "open door", "look"]}
    observations = ["You see a key.", "You took the key.", "A door.", "The door is locked."]

    def play(reuse: bool, batch: int):
        backend = HFChatBackend(model, tokenizer, reuse_prefix=reuse)
        policy = LLMPolicy(backend, Sampling(temperature=0, max_new_tokens=10))
        states = [policy.start(seed) for seed in range(batch)]
        turns = [[r.completion.completion_ids for r in policy.act_batch(states, [o] * batch, [info] * batch)]
                 for o in observations]
        return turns, backend

    full, _ = play(reuse=False, batch=3)
    cached, backend = play(reuse=True, batch=3)
    assert cached == full
    assert backend.reused_tokens > backend.prompt_tokens_run  # later turns ran only their new tokens
    with torch.no_grad():
        next(model.parameters()).add_(0.0)  # an in-place update bumps the weights' version: the cache is dropped
    policy = LLMPolicy(backend, Sampling(temperature=0, max_new_tokens=10))
    before = backend.reused_tokens
    policy.act_batch([policy.start(0)], [observations[0]], [info])
    assert backend.reused_tokens == before and len(backend._prefixes) == 1  # only the new conversation is kept


def test_kv_reuse_keeps_each_rows_own_tokens_when_rows_end_at_different_steps(tiny) -> None:
    """Sampled replies end at different steps; rows that ended are still fed tokens: none of them may be kept."""
    model, tokenizer = tiny
    info = {"task": "open the door", "admissible_commands": ["take key", "open door", "look"]}

    def play(reuse: bool):
        backend = HFChatBackend(model, tokenizer, reuse_prefix=reuse)
        # a common letter as stop string: the untrained model's rows end at different steps
        policy = LLMPolicy(backend, Sampling(temperature=1.5, max_new_tokens=16, stop=("e",)))
        states = [policy.start(seed) for seed in range(6)]  # the same prompts: no padding anywhere
        return [[r.completion.completion_ids for r in policy.act_batch(states, [obs] * 6, [info] * 6)]
                for obs in ("You see a key.", "You took the key.", "A door.")]

    full = play(reuse=False)
    assert len({len(ids) for ids in full[0]}) > 1, "every row ended at the same step: the test shows nothing"
    assert play(reuse=True) == full


def _record_forwards(model):
    """Per forward call of ``model``: (rows fed, the cache object, its layer-0 keys' storage, its length)."""
    calls = []

    def hook(_module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        store = cache.layers[0].store
        calls.append((kwargs["input_ids"].shape[0], id(cache), store.keys[0].data_ptr() if store.keys else None,
                      cache.get_seq_length()))

    return calls, model.register_forward_pre_hook(hook, with_kwargs=True)


def test_decoding_writes_one_preallocated_cache_in_place(tiny) -> None:
    model, tokenizer = tiny
    backend = HFChatBackend(model, tokenizer, reuse_prefix=False)
    calls, handle = _record_forwards(model)
    try:
        backend.complete(CHATS, seeds=[0, 1, 2], sampling=Sampling(temperature=0, max_new_tokens=6))
    finally:
        handle.remove()
    rows, caches, storages, lengths = zip(*calls)
    assert len(set(caches)) == 1  # one cache for the prompt and every decoded token
    assert len(set(storages[1:])) == 1  # allocated once (at the prompt's forward pass), then written in place
    width = lengths[1]  # the padded prompt
    assert list(lengths[1:]) == list(range(width, width + len(calls) - 1))


def test_a_row_whose_reply_ended_is_no_longer_fed(tiny) -> None:
    model, tokenizer = tiny
    backend = HFChatBackend(model, tokenizer, reuse_prefix=False)
    sampling = Sampling(temperature=1.5, max_new_tokens=16, stop=("e",))
    calls, handle = _record_forwards(model)
    try:
        completions = backend.complete([CHATS[0]] * 6, seeds=list(range(6)), sampling=sampling)
    finally:
        handle.remove()
    lengths = sorted(c.completion_tokens for c in completions)
    assert lengths[0] < lengths[-1], "every row ended at the same step: the test shows nothing"
    rows_fed = [rows for rows, *_ in calls[1:]]  # after the prompt: one call per fed token
    # the token sampled at step s is fed to the rows whose replies are longer than s + 1
    assert rows_fed == [sum(n > step + 1 for n in lengths) for step in range(lengths[-1] - 1)]


@pytest.mark.slow
def test_the_compiled_decode_step_gives_the_eager_replies(tiny) -> None:
    model, tokenizer = tiny
    sampling = Sampling(temperature=0, max_new_tokens=6)
    eager = HFChatBackend(model, tokenizer).complete(CHATS, seeds=[0, 1, 2], sampling=sampling)
    fast = HFChatBackend(model, tokenizer, compile=True).complete(CHATS, seeds=[0, 1, 2], sampling=sampling)
    assert [c.completion_ids for c in fast] == [c.completion_ids for c in eager]
    for compiled_row, eager_row in zip(fast, eager):
        assert compiled_row.logprobs == pytest.approx(eager_row.logprobs, abs=1e-4)


def test_the_hf_policy_refuses_a_compile_setting_that_is_not_a_boolean() -> None:
    with pytest.raises(ValueError, match="compile must be true or false, got 'yes'"):
        make_policy("hf", model="tiny", tiny_env="KeyDoor-v0", compile="yes")
