"""verl: the budgeted envs played by verl's own ``AgentLoopWorker.generate_sequences`` on CPU.

The worker is verl's, built by its own ``__init__`` from verl's trainer config (``_generated_ppo_trainer.yaml``)
with our agent loops loaded from an ``agent_loop_config_path`` yaml, as a GPU run configures it; the
rows come from our parquet files through verl's ``RLHFDataset`` and ``collate_fn``, repeated ``n``
times per prompt with a ``uid`` as verl's trainer does.  Only the rollout server is ours: a CPU
implementation of verl's ``LLMServerClient.generate`` backed by the tiny model
(``tests/verl_cpu_server.py``), and SmolLM2-135M-Instruct when its conversion is cached.  What stays untested here: vLLM/SGLang servers, Ray actors (the
worker runs in the test's process), a training step.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl", reason="needs the verl extra in a venv of its own: pip install '.[verl,test]' (.ci/run)")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402
from verl_cpu_server import CHATML, TinyModelServer, key_door_expert, random_command  # noqa: E402

import agentgym_budget  # noqa: E402,F401
from agentgym_budget.integrations import verl_agent_loop  # noqa: E402
from agentgym_budget.integrations.session import BudgetSession, format_turn  # noqa: E402
from agentgym_budget.integrations.verl_dataset import write_verl_dataset  # noqa: E402
from agentgym_budget.policies.prompting import parse_action, system_message  # noqa: E402
from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow  # verl's import alone takes tens of seconds

AGENT_LOOPS = """
- name: budget_test
  _target_: agentgym_budget.integrations.verl_agent_loop.BudgetAgentLoop
  env_kwargs: {show_budget: true}
- name: budget_broken
  _target_: agentgym_budget.integrations.verl_agent_loop.BudgetAgentLoop
  env_kwargs: {show_budget: true}
  wrappers: ["verl_cpu_server:BrokenStep"]
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model and its tokenizer (with a ChatML template) saved as a Hugging Face model directory."""
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    tokenizer.chat_template = CHATML
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "agent_loops.yaml").write_text(AGENT_LOOPS)
    return path


def make_worker(model_dir: Path, response_length: int = 256) -> AgentLoopWorker:
    import verl

    config = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    rollout = config.actor_rollout_ref.rollout
    config.actor_rollout_ref.model.path = str(model_dir)
    rollout.name, rollout.prompt_length, rollout.response_length = "vllm", 512, response_length
    rollout.calculate_log_probs = True
    rollout.agent.agent_loop_config_path = str(model_dir / "agent_loops.yaml")
    return AgentLoopWorker(config, llm_client=None)


@pytest.fixture(scope="module")
def worker(model_dir: Path) -> AgentLoopWorker:
    return make_worker(model_dir)


@pytest.fixture(scope="module")
def model(model_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir).eval()


def rows_batch(tmp_path: Path, worker: AgentLoopWorker, budget, n: int, rows: int, agent_name: str = "budget_test",
               env_id: str = "KeyDoor-Budget-v0") -> DataProto:
    """``rows`` train rows through verl's RLHFDataset and collate_fn, each repeated ``n`` times with a uid."""
    paths = write_verl_dataset(tmp_path / str(uuid.uuid4()), env_id, budget, train=rows, held_out=2)
    config = OmegaConf.create({"max_prompt_length": 512, "filter_overlong_prompts": True,
                               "filter_overlong_prompts_workers": 1, "cache_dir": str(tmp_path / "cache")})
    dataset = RLHFDataset(str(paths["train"]), worker.tokenizer, config)
    assert len(dataset) == rows  # none filtered out as too long
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(rows)]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(rows)], dtype=object)
    batch.non_tensor_batch["agent_name"] = np.array([agent_name] * rows, dtype=object)
    return batch.repeat(repeat_times=n, interleave=True)


def generate(worker: AgentLoopWorker, server: TinyModelServer, batch: DataProto) -> DataProto:
    worker.llm_client = server  # the agent loops reach the model through this client
    return asyncio.run(worker.generate_sequences(batch))


def sample(out: DataProto, i: int) -> dict:
    """Sample ``i`` unpadded: its token ids, where its response starts, its response mask and log-probs."""
    attention = out.batch["attention_mask"][i].bool()
    prompt_len = int(out.batch["attention_mask"][i][: out.batch["prompts"].shape[1]].sum())
    length = int(attention.sum()) - prompt_len
    return {"ids": out.batch["input_ids"][i][attention].tolist(), "prompt_len": prompt_len,
            "mask": out.batch["response_mask"][i][:length].tolist(),
            "logprobs": out.batch["rollout_log_probs"][i][:length],
            "info": out.non_tensor_batch["reward_extra_info"][i] if "reward_extra_info" in out.non_tensor_batch
            else {k: out.non_tensor_batch[k][i] for k in out.meta_info["reward_extra_keys"]},
            "stop": out.non_tensor_batch["stop_reason"][i], "episode": out.non_tensor_batch["episode"][i],
            "reward": float(out.batch["rm_scores"][i].sum()), "extra_info": out.non_tensor_batch["extra_info"][i]}


def check_logprobs(model, s: dict, atol: float = 1e-5) -> float:
    """The server's log-probs of the model's tokens equal a fresh forward pass of the same tokens (to ``atol``);
    the env's tokens have log-prob 0.  The largest difference."""
    with torch.no_grad():
        logits = model(torch.tensor([s["ids"]])).logits[0].float()
    fresh = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(s["ids"][1:])[:, None])[:, 0]
    response = fresh[s["prompt_len"] - 1:]
    mask = torch.tensor(s["mask"], dtype=torch.bool)
    assert mask.any()
    largest = float((s["logprobs"][mask] - response[mask]).abs().max())
    assert largest <= atol, largest
    assert torch.all(s["logprobs"][~mask] == 0)
    return largest


def replies_of(s: dict, tokenizer) -> list[str]:
    """The text of each run of mask-1 tokens (the model's replies), without the end-of-turn token."""
    replies, current = [], []
    for token, bit in zip(s["ids"][s["prompt_len"]:], s["mask"]):
        if bit:
            current.append(token)
        elif current:
            replies.append(current)
            current = []
    replies += [current] if current else []
    return [tokenizer.decode(r, skip_special_tokens=True) for r in replies]


def expected_conversation(s: dict, tokenizer, budget) -> tuple[list[dict], BudgetSession]:
    """The conversation the one renderer writes for this episode, replayed in a local session with the replies."""
    info = s["extra_info"]
    session = BudgetSession(info["env_id"], budget, show_budget=True, split=info["split"])
    session.reset(seed=info["seed"])
    messages = [dict(system_message(session.info["task"])), {"role": "user", "content": format_turn(session)}]
    for reply in replies_of(s, tokenizer):
        messages.append({"role": "assistant", "content": reply})
        session.step(parse_action(reply, session.admissible_commands))
        if not session.done:
            messages.append({"role": "user", "content": format_turn(session)})
    return messages, session


def test_expert_and_random_episodes_through_the_worker(tmp_path: Path, worker, model) -> None:
    """A budget mix over rows; masks, log-probs, rewards, budgets and the terminated/truncated split."""
    tokenizer = worker.tokenizer
    spec = "mix:1,2,3"
    for script, n_rows in ((key_door_expert, 6), (random_command, 6)):
        verl_agent_loop.reset_shared_progress()
        out = generate(worker, TinyModelServer(model, tokenizer, script=script, seed=1), rows_batch(tmp_path, worker, spec, n=2, rows=n_rows))
        assert len(out) == 2 * n_rows
        local = BudgetSession("KeyDoor-Budget-v0", spec)
        budgets = []
        for i in range(len(out)):
            s = sample(out, i)
            check_logprobs(model, s)
            messages, session = expected_conversation(s, tokenizer, spec)
            # the tokens are the chat template's rendering of the one renderer's conversation (last "\n" aside)
            rendered = tokenizer.apply_chat_template(messages, tokenize=False)
            assert tokenizer.decode(s["ids"], skip_special_tokens=False) == rendered.removesuffix("\n")
            assert s["ids"] == tokenizer(rendered.removesuffix("\n"), add_special_tokens=False)["input_ids"]
            # the budget is TurnBudget's draw for the row's seed; the episode's end is the env's or the budget's
            local.reset(seed=s["extra_info"]["seed"])
            assert s["info"]["budget"] == local.budget == session.budget
            budgets.append(session.budget)
            assert s["info"]["turns"] == session.turn <= session.budget
            assert s["stop"] == session.outcome and s["stop"] in ("terminated", "truncated")
            assert s["info"]["terminated"] == float(session.terminated) and s["info"]["truncated"] == float(session.truncated)
            assert s["info"]["won"] == float(session.won) and s["reward"] == s["info"]["return"] == session.total_reward
            assert s["info"]["response_cut"] == s["info"]["failed"] == 0.0
            if script is key_door_expert:  # the expert wins in 2 turns: a win on the last turn is terminated
                assert s["stop"] == ("truncated" if session.budget == 1 else "terminated")
                assert s["reward"] == (0.0 if session.budget == 1 else 1.0)
        assert budgets[0::2] == budgets[1::2]  # the n rollouts of a row play one budget
        assert len(set(budgets)) > 1  # a mix over rows
    assert out.meta_info["reward_extra_keys"]  # verl logs reward_extra_info per sample


def test_a_failing_env_costs_its_episode_only(tmp_path: Path, worker, model) -> None:
    server = TinyModelServer(model, worker.tokenizer, script=key_door_expert)
    with pytest.warns(RuntimeWarning, match="backend lost"):
        out = generate(worker, server, rows_batch(tmp_path, worker, 3, n=2, rows=2, agent_name="budget_broken"))
    for i in range(len(out)):
        s = sample(out, i)
        assert s["stop"] == "env_failed" and s["info"]["failed"] == 1.0 and s["info"]["env_failures"] == 2.0
        assert s["reward"] == 0.0 and s["mask"] and not any(s["mask"])  # no loss on it
        assert "ConnectionError: backend lost" in s["episode"]["error"]
    # the same worker plays on: the next batch is unaffected
    out = generate(worker, server, rows_batch(tmp_path, worker, 3, n=1, rows=2))
    assert [sample(out, i)["stop"] for i in range(2)] == ["terminated", "terminated"]


def test_a_curriculum_advances_across_calls_and_a_group_shares_its_budget(tmp_path: Path, worker, model) -> None:
    verl_agent_loop.reset_shared_progress()
    spec = "curriculum:4->1@4"
    server = TinyModelServer(model, worker.tokenizer, script=random_command)
    first = generate(worker, server, rows_batch(tmp_path, worker, spec, n=2, rows=2))
    second = generate(worker, server, rows_batch(tmp_path, worker, spec, n=2, rows=2))
    budgets = [[sample(out, i)["info"]["budget"] for i in range(4)] for out in (first, second)]
    for call in budgets:
        assert call[0::2] == call[1::2]  # a group plays the progress of its first rollout
    assert min(budgets[0]) >= 2 and budgets[1] == [1, 1, 1, 1]  # progress 0..3, then 4..7 (past the end)
    assert verl_agent_loop.shared_progress("KeyDoor-Budget-v0", spec, {"show_budget": True, "split": "train"}) == 8.0


def test_response_length_reached_mid_episode(tmp_path: Path, model_dir: Path, model) -> None:
    """A reply cut at the limit is not played; an env message that does not fit ends the trajectory too."""
    small = make_worker(model_dir, response_length=40)
    tokenizer = small.tokenizer
    # the tiny model samples freely: no end-of-turn within the room left, so the reply is cut
    cut = generate(small, TinyModelServer(model, tokenizer, max_sampled_tokens=1000), rows_batch(tmp_path, small, 5, n=1, rows=2))
    for i in range(2):
        s = sample(cut, i)
        assert s["stop"] == "response_length" and s["info"]["response_cut"] == 1.0
        assert s["info"]["turns"] == 0  # the cut reply's command was not played
        assert s["info"]["terminated"] == s["info"]["truncated"] == 0.0 and s["reward"] == 0.0
        assert len(s["mask"]) == 40 and all(s["mask"])
        check_logprobs(model, s)
    # short scripted replies: the env's message after the first reply does not fit in 40 tokens
    full = generate(small, TinyModelServer(model, tokenizer, script=random_command), rows_batch(tmp_path, small, 5, n=1, rows=2))
    for i in range(2):
        s = sample(full, i)
        assert s["stop"] == "response_length" and s["info"]["turns"] == 1 and len(s["mask"]) == 40
        assert s["mask"][0] == 1 and s["mask"][-1] == 0  # the reply, then the env's message cut at the limit
        check_logprobs(model, s)


def test_bad_rows_are_one_line_errors(tmp_path: Path, worker, model) -> None:
    server = TinyModelServer(model, worker.tokenizer, script=random_command)
    batch = rows_batch(tmp_path, worker, 3, n=1, rows=1)
    batch.non_tensor_batch["extra_info"][0] = {**batch.non_tensor_batch["extra_info"][0], "env_id": "Nope-Budget-v0"}
    with pytest.raises(ValueError, match=r"^agentgym_budget row \(env_id='Nope-Budget-v0'") as error:
        generate(worker, server, batch)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="needs an integer extra_info\\['seed'\\]"):
        verl_agent_loop.EpisodeRow({"env_id": "KeyDoor-Budget-v0", "seed": "x"})


def test_held_out_rows_play_the_held_out_split(tmp_path: Path) -> None:
    import pandas as pd

    paths = write_verl_dataset(tmp_path, "ALFWorld-Budget-v0", "mix:10,20,30,40,50", train=3, held_out=2,
                               held_out_budget=50)
    train, held_out = (pd.read_parquet(paths[name]) for name in ("train", "held_out"))
    assert [r["split"] for r in train["extra_info"]] == ["train"] * 3
    assert [r["split"] for r in held_out["extra_info"]] == ["valid_unseen"] * 2
    assert {r["budget"] for r in held_out["extra_info"]} == {"50"}
    assert not {r["seed"] for r in train["extra_info"]} & {r["seed"] for r in held_out["extra_info"]}
    assert os.path.getsize(paths["train"]) > 0


def test_a_curriculum_is_shared_by_the_processes_of_a_ray_job(tmp_path: Path, worker, model) -> None:
    """In a Ray job (verl's workers are Ray actors) the counters live in one named actor: another process sees them."""
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        verl_agent_loop.reset_shared_progress()
        spec, env_kwargs = "curriculum:4->1@4", {"show_budget": True, "split": "train"}
        server = TinyModelServer(model, worker.tokenizer, script=random_command)
        first = generate(worker, server, rows_batch(tmp_path, worker, spec, n=2, rows=2))
        assert min(sample(first, i)["info"]["budget"] for i in range(4)) >= 2

        @ray.remote(num_cpus=0)
        def claim_in_another_process() -> tuple[float, float]:  # as another AgentLoopWorker actor would
            from agentgym_budget.integrations import verl_agent_loop as loop

            key = loop.counter_key("KeyDoor-Budget-v0", spec, env_kwargs)
            return loop.shared_progress("KeyDoor-Budget-v0", spec, env_kwargs), loop._book_call(loop._book(), "claim", key, 1.0)

        assert ray.get(claim_in_another_process.remote()) == (4.0, 4.0)
        second = generate(worker, server, rows_batch(tmp_path, worker, spec, n=2, rows=2))
        assert [sample(second, i)["info"]["budget"] for i in range(4)] == [1, 1, 1, 1]
        assert verl_agent_loop.shared_progress("KeyDoor-Budget-v0", spec, env_kwargs) == 9.0
    finally:
        ray.shutdown()


def converted_smollm2() -> Path | None:
    """SmolLM2-135M-Instruct as converted once by the ``[smollm2]`` extra (``policies.smollm2.hf_folder``), if cached."""
    from agentgym_budget.policies.smollm2 import MANIFEST, cache_root

    return next((p for p in sorted(cache_root().glob("smollm2-*")) if (p / MANIFEST).is_file()), None)


@pytest.mark.skipif(converted_smollm2() is None,
                    reason="needs SmolLM2-135M-Instruct converted once (the [smollm2] extra's hf_folder(), in any venv)")
def test_smollm2_samples_through_the_worker_with_its_own_chat_template(tmp_path: Path) -> None:
    """A real model and template (SmolLM2's ChatML, a llama: verl's default Continuous Token builder), sampling freely.

    Its log-probs agree with a fresh forward pass to 1e-4, not 1e-5: 30 fp32 layers over a growing prefix
    (the server) and over the whole sequence at once (the check) sum in different orders (measured: about 1e-5)."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "smollm2"
    folder.mkdir()
    for path in converted_smollm2().iterdir():
        (folder / path.name).symlink_to(path)
    (folder / "agent_loops.yaml").write_text(AGENT_LOOPS)
    smol = make_worker(folder, response_length=96)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    out = generate(smol, TinyModelServer(model, smol.tokenizer, max_sampled_tokens=12, seed=3),
                   rows_batch(tmp_path, smol, 2, n=2, rows=1))
    for i in range(len(out)):
        s = sample(out, i)
        print(f"SmolLM2 episode {i}: largest log-prob difference {check_logprobs(model, s, atol=1e-4):.2e}")
        assert s["stop"] in ("terminated", "truncated", "response_length")
        assert s["info"]["turns"] <= 2 and s["reward"] == s["info"]["return"]
        text = smol.tokenizer.decode(s["ids"], skip_special_tokens=False)
        assert text.startswith("<|im_start|>system\nYou are an agent acting in a text environment.")
        assert "[Turns left: 2 of 2]\nAvailable commands: take key" in text
