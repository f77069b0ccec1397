"""The one LLM policy layer: the HF chat backend's sampler, context limit, LLMPolicy, batched evaluation."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.eval import evaluate  # noqa: E402
from agentgym_budget.episodes.process_pool import EpisodeProcessPool  # noqa: E402
from agentgym_budget.episodes.records import EpisodeJob  # noqa: E402
from agentgym_budget.episodes.runner import RolloutSpec, SerialExecutor  # noqa: E402
from agentgym_budget.policies import LLMPolicy, make_policy  # noqa: E402
from agentgym_budget.eval.transcripts import read_transcripts  # noqa: E402
from agentgym_budget.policies.chat import Completion, Sampling  # noqa: E402
from agentgym_budget.policies.hf import _PREFILL_ROWS, HFChatBackend, _prompt_text, encode_conversation  # noqa: E402
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
    assert EpisodeProcessPool(2).run(spec, jobs) == sequential  # processes compose with episodes in flight
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
        root = store._parent[0] if store._parent is not None else store  # a prefill group writes through a window
        calls.append((kwargs["input_ids"].shape[0], id(cache), root.keys[0].data_ptr() if root.keys else None,
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
    assert len(set(caches[1:])) == 1  # one cache for every decoded token (the prompt wrote it through a window)
    assert len(set(storages[1:])) == 1  # allocated once (at the prompt's forward pass), then written in place
    width = lengths[1]  # the padded prompt
    assert list(lengths[1:]) == list(range(width, width + len(calls) - 1))


def test_a_prefill_in_row_groups_gives_every_row_its_reply_alone(tiny) -> None:
    """More rows than one prefill group, of very different lengths, over two turns (the second reuses the cache)."""
    model, tokenizer = tiny
    assert 9 > 2 * _PREFILL_ROWS, "fewer than three groups: the test shows little"
    info = {"task": "open the door", "admissible_commands": ["take key", "open door", "look"]}
    firsts = [f"You see {'a key and ' * (3 * i)}a door." for i in range(9)]
    seconds = [f"{'Nothing happens. ' * (9 - i)}You took it." for i in range(9)]

    def play(rows: list[int]):
        policy = LLMPolicy(HFChatBackend(model, tokenizer), Sampling(temperature=1.0, max_new_tokens=6))
        states = [policy.start(row) for row in rows]
        return [[(r.completion.completion_ids, r.completion.logprobs)
                 for r in policy.act_batch(states, [observations[row] for row in rows], [info] * len(rows))]
                for observations in (firsts, seconds)]

    together = play(list(range(9)))
    for row in range(9):
        alone = play([row])
        for turn in range(2):
            assert together[turn][row][0] == alone[turn][0][0]
            assert together[turn][row][1] == pytest.approx(alone[turn][0][1], abs=1e-5)


def test_the_batch_cache_is_as_wide_as_the_longest_prompt_and_every_row_replies_as_alone(tiny) -> None:
    """Rows continuing with reused prefixes beside a long fresh prompt: each row's prompt is one piece, so the
    cache is max(prompt) + reply wide (not max(prefix) + max(new tokens) + reply), and the pads a short row runs
    over its prefix in a prefill group leave that prefix intact: every row replies as it does alone."""
    model, tokenizer = tiny
    sampling = Sampling(temperature=0, max_new_tokens=8)

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    firsts = [encode(f"Observation: you see {'a key and ' * (4 * i)}a door.") for i in range(3)]
    fresh = encode("Observation: " + "a long corridor with doors " * 20)
    extras = [encode(" Nothing happens."), encode(" You took the key and the door opened." * 3), encode(" A door.")]

    def play(rows: list[int]):
        """Two turns of conversations ``rows`` (3: the fresh prompt, second turn only): the second turn's
        (reply ids, logprobs) per row, every batch's cache capacity, the second turn's prompts, the backend."""
        backend = HFChatBackend(model, tokenizer)
        capacities, prefill = [], backend._prefill

        def recorded(*args, **kwargs):
            batch = prefill(*args, **kwargs)
            capacities.append(batch.cache.capacity)
            return batch

        backend._prefill = recorded
        old = [row for row in rows if row < 3]
        replies = {}
        if old:
            for row, c in zip(old, backend.generate([firsts[r] for r in old], old, sampling, keys=old)):
                replies[row] = c.completion_ids
        prompts = [firsts[r] + replies[r] + extras[r] if r < 3 else fresh for r in rows]
        second = backend.generate(prompts, rows, sampling, keys=rows)
        return [(c.completion_ids, c.logprobs) for c in second], capacities, prompts, backend

    together, capacities, prompts, backend = play([0, 1, 2, 3])
    assert backend.reused_tokens >= sum(len(firsts[r]) for r in range(3))  # the second turn reused the prefixes
    longest = max(len(p) for p in prompts)
    assert len(fresh) == longest, "the fresh prompt (no prefix) must be the longest"
    assert capacities[-1] == longest + sampling.max_new_tokens - 1
    for row in range(4):
        alone, *_ = play([row])
        assert together[row][0] == alone[0][0]
        assert together[row][1] == pytest.approx(alone[0][1], abs=1e-5)


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


def test_drawing_each_rows_random_numbers_ahead_changes_no_reply(tiny, monkeypatch) -> None:
    """A row's draws for a whole reply at once (the default for a small vocabulary) equal one draw per token."""
    import agentgym_budget.policies.hf as hf

    model, tokenizer = tiny
    sampling = Sampling(temperature=1.0, top_p=0.9, max_new_tokens=10)
    ahead = HFChatBackend(model, tokenizer).complete(CHATS, seeds=[3, 4, 5], sampling=sampling)
    monkeypatch.setattr(hf, "_DRAWS_PER_ROW", 1)  # a block of one token: one random call per row per token
    one_by_one = HFChatBackend(model, tokenizer).complete(CHATS, seeds=[3, 4, 5], sampling=sampling)
    assert [c.completion_ids for c in ahead] == [c.completion_ids for c in one_by_one]
    assert [c.logprobs for c in ahead] == [c.logprobs for c in one_by_one]
    assert len({tuple(c.completion_ids) for c in ahead}) == 3  # the rows did sample (different seeds, replies)


@pytest.mark.slow
def test_the_compiled_decode_step_gives_the_eager_replies_and_is_traced_once_per_row_count(tiny) -> None:
    """Greedy, then sampled with rows ending at different steps (compacted out of the batch), then prompts of
    other lengths: every reply is the eager one, and the static-shape step is traced at most twice (several rows,
    one row), not once per token or per cache width."""
    model, tokenizer = tiny
    eager, fast = HFChatBackend(model, tokenizer), HFChatBackend(model, tokenizer, compile=True)
    step_shapes = set()  # (rows, cache width) of every compiled decode step
    compiled_step = fast._decode_step

    def recorded_step(**inputs):
        step_shapes.add((inputs["input_ids"].shape[0], inputs["attention_mask"].shape[-1]))
        return compiled_step(**inputs)

    fast._decode_step = recorded_step
    ends_early = Sampling(temperature=1.5, max_new_tokens=16, stop=("e",))  # a common letter: rows end apart
    calls = [(CHATS, Sampling(temperature=0, max_new_tokens=6)),
             ([CHATS[0]] * 3 + [CHATS[2]] * 3, ends_early),
             ([chat("a long corridor " * 9)] * 2 + [CHATS[1]] * 3, ends_early)]
    torch._dynamo.reset()  # no graph of an earlier test is reused...
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]  # ...and reset() keeps the counters
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for chats, sampling in calls:
            seeds = list(range(len(chats)))
            slow, quick = eager.complete(chats, seeds, sampling), fast.complete(chats, seeds, sampling)
            assert [c.completion_ids for c in quick] == [c.completion_ids for c in slow]
            for compiled_row, eager_row in zip(quick, slow):
                assert compiled_row.logprobs == pytest.approx(eager_row.logprobs, abs=1e-4)
            if sampling is ends_early:
                assert len({c.completion_tokens for c in slow}) > 1, "the rows ended together: nothing compacted"
    assert not [w for w in caught if "torch.compile" in str(w.message)], "the step ran eagerly"
    assert len({width for _, width in step_shapes}) >= 3 and len({rows for rows, _ in step_shapes}) >= 3
    assert 1 <= torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before <= 2


def test_the_grouped_decode_attention_gives_transformers_replies_and_auto_picks_it_off_float32(tiny) -> None:
    """The tiny model's 4 query heads share 2 key-value heads: grouped or not, the same replies; ``auto`` keeps
    transformers' path in float32 (bit for bit) and groups in bfloat16."""
    model, tokenizer = tiny
    plain = HFChatBackend(model, tokenizer, decode_attention="transformers")
    grouped = HFChatBackend(model, tokenizer, decode_attention="grouped")
    assert HFChatBackend(model, tokenizer)._decode_step is model  # auto, float32: transformers' own call
    for sampling in (Sampling(temperature=0, max_new_tokens=6), Sampling(temperature=1.0, max_new_tokens=8)):
        mine, theirs = (backend.complete(CHATS, [1, 2, 3], sampling) for backend in (grouped, plain))
        assert [c.completion_ids for c in mine] == [c.completion_ids for c in theirs]
        for a, b in zip(mine, theirs):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    half, half_tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    assert HFChatBackend(half.to(torch.bfloat16), half_tokenizer)._decode_step is not half
    with pytest.raises(ValueError, match="decode_attention must be one of"):
        HFChatBackend(model, tokenizer, decode_attention="fast")


def test_the_hf_policy_refuses_a_compile_setting_that_is_not_a_boolean() -> None:
    with pytest.raises(ValueError, match="compile must be true or false, got 'yes'"):
        make_policy("hf", model="tiny", tiny_env="KeyDoor-v0", compile="yes")


# -- append-only conversations (history="append") -------------------------------------------------
KEY_INFO = {"task": "open the door", "admissible_commands": ["take key", "open door"], "turns_left": 3, "budget": 5}


def _play_append(tiny, observations, rows=2, **sampling):
    """Turns of ``rows`` append-mode episodes: per turn (messages, completions, prefill input ids fed)."""
    model, tokenizer = tiny
    backend = HFChatBackend(model, tokenizer)
    policy = LLMPolicy(backend, Sampling(**{"temperature": 1.0, "max_new_tokens": 8, **sampling}), history="append",
                       show_budget=True)
    states = [policy.start(seed) for seed in range(rows)]
    turns = []
    for obs in observations:
        messages = [policy.messages(s, obs, KEY_INFO) for s in states]
        fed = []
        handle = model.register_forward_pre_hook(lambda _m, _a, kw: fed.append(kw["input_ids"].clone()),
                                                 with_kwargs=True)
        try:
            completions = [r.completion for r in policy.act_batch(states, [obs] * rows, [KEY_INFO] * rows)]
        finally:
            handle.remove()
        turns.append((messages, completions, fed[0]))
    return backend, states, turns


def test_append_mode_feeds_the_last_prompt_the_sampled_reply_and_only_the_new_message(tiny) -> None:
    backend, states, turns = _play_append(tiny, ["You see a key.", "You took the key.", "A door."])
    for (_, before, _), (messages, after, prefill) in zip(turns, turns[1:]):
        for row, (old, new) in enumerate(zip(before, after)):
            appended = backend.appended_ids(old.prompt_ids + old.completion_ids, messages[row][-1])
            assert new.prompt_ids == old.prompt_ids + old.completion_ids + appended
            # the KV cache holds all but the last sampled token: that token and the new message are all that run
            expected = [old.completion_ids[-1], *appended]
            assert prefill[row, -len(expected):].tolist() == expected
        assert prefill.shape[1] == max(1 + len(new.prompt_ids) - len(old.prompt_ids) - len(old.completion_ids)
                                       for old, new in zip(before, after))
    last_messages = turns[-1][0][0]
    users = [m["content"] for m in last_messages if m["role"] == "user"]
    assert len(users) == 3 and all("[Turns left: 3 of 5]" in u and "Available commands: take key" in u for u in users)
    assert [m["content"] for m in last_messages if m["role"] == "assistant"] == [
        t[1][0].text for t in turns[:-1]]  # past replies whole, as sampled (a text backend is sent these)
    assert states[0].ids == turns[-1][1][0].prompt_ids + turns[-1][1][0].completion_ids


def _chatml(tokenizer):
    import copy

    templated = copy.deepcopy(tokenizer)
    templated.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{{ eos_token }}\n"
                               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return templated


@pytest.mark.parametrize("template", ["plain", "chatml"])
@pytest.mark.parametrize("ends_on_eos", [False, True])
def test_appended_ids_equal_encoding_the_conversation_text_where_the_tokenizer_round_trips(tiny, template,
                                                                                          ends_on_eos) -> None:
    model, tokenizer = tiny
    tokenizer = _chatml(tokenizer) if template == "chatml" else tokenizer
    backend = HFChatBackend(model, tokenizer)
    # a reply the tiny tokenizer splits from the prompt as it would in one text (after the plain prompt's
    # "Thought:", a space would merge with it: there the ids and the re-encoded text differ, by design)
    reply = "\tI take key"
    reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    if ends_on_eos:
        reply_ids.append(tokenizer.eos_token_id)
    first = chat("You see a key.")
    new = {"role": "user", "content": "Observation: You took the key."}
    previous = encode_conversation(tokenizer, first) + reply_ids
    appended = backend.appended_ids(previous, new)
    text = tokenizer.decode(previous + appended)  # the append-only conversation's text, special tokens included
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == previous + appended
    if template == "chatml":  # the same text the chat template writes for the whole conversation
        assert text == _prompt_text(tokenizer, [*first, {"role": "assistant", "content": reply}, new])
    else:
        ending = ("<|im_end|>" if ends_on_eos else "") + "\nObservation: You took the key.\nThought:"
        assert text.endswith(reply + ending)
    [completion] = backend.complete([[*first, {"role": "assistant", "content": reply}, new]], [0],
                                    Sampling(max_new_tokens=2), previous=[previous])
    assert completion.prompt_ids == previous + appended


def test_append_mode_sampler_logprobs_are_what_the_trainers_loss_computes(tiny) -> None:
    model, tokenizer = tiny
    _, _, turns = _play_append(tiny, ["You see a key.", "You took the key."], rows=2, temperature=0.7)
    for completion in turns[-1][1]:  # a later turn: its prompt holds sampled ids and ran mostly from the KV cache
        sample = TurnSample(completion.prompt_ids + completion.completion_ids, len(completion.prompt_ids), 1.0)
        logp, _ = action_logprobs(model, collate([sample], tokenizer.pad_token_id, "token-mean"), temperature=0.7)
        assert logp.tolist() == pytest.approx(completion.logprobs, abs=1e-5)


def test_append_mode_starts_again_from_the_latest_turns_past_max_turns_shown(tiny) -> None:
    model, tokenizer = tiny
    policy = LLMPolicy(HFChatBackend(model, tokenizer), Sampling(max_new_tokens=3), history="append",
                       max_turns_shown=4)
    state = policy.start(0)
    completions = [policy.act_batch([state], [f"room {turn}"], [KEY_INFO])[0].completion for turn in range(6)]
    shown = [m["content"].split("\n")[0] for m in policy.messages(state, "next", KEY_INFO) if m["role"] == "user"]
    # turn 4 would have shown 5 turns: the conversation started again from the latest two (3, 4), then grew again
    assert shown == ["Observation: room 3", "Observation: room 4", "Observation: room 5", "Observation: next"]
    restart, after = completions[4], completions[5]
    assert len(restart.prompt_ids) < len(completions[3].prompt_ids)
    assert after.prompt_ids[: len(restart.prompt_ids) + len(restart.completion_ids)] == (restart.prompt_ids
                                                                                         + restart.completion_ids)
    with pytest.raises(ValueError, match="history must be one of"):
        LLMPolicy(HFChatBackend(model, tokenizer), history="whole")


def test_writing_one_row_of_a_cache_without_its_row_count_is_refused() -> None:
    from agentgym_budget.policies.kv_cache import BatchKVCache

    with pytest.raises(ValueError, match=r"BatchKVCache\(capacity, rows=...\)"):
        BatchKVCache(capacity=4).write(0, torch.ones(1, 2, 8), torch.ones(1, 2, 8), start=0, row=1)
    cache = BatchKVCache(capacity=4, rows=2)
    cache.write(0, torch.ones(1, 2, 8), torch.ones(1, 2, 8), start=2, row=1)
    assert cache.keys[0][:, 0, :, 0].tolist() == [[0.0] * 4, [0.0, 0.0, 1.0, 1.0]]
