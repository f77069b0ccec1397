"""``--config FILE`` for ``train``, ``sft`` and ``eval``: a file's settings, any flag overriding them,
bad keys refused in one line."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from agentgym_budget.cli import _parser, main
from agentgym_budget.eval.config import EvalConfig
from agentgym_budget.flags import from_arguments, parse_with_config
from agentgym_budget.train.config import SFTConfig, TrainConfig, config_from_arguments


def flagged(config: object) -> dict[str, object]:
    return {key: value for key, value in dataclasses.asdict(config).items()}


def test_a_train_config_written_to_yaml_reads_back_the_same(tmp_path):
    config = TrainConfig(env_id="KeyDoorRooms-v0", env_kwargs={"split": "train"}, budget="mix:4,8", total_updates=7,
                         learning_rate=3e-5, seed=4)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(flagged(config)))
    args = parse_with_config(_parser(), ["train", "--config", str(path)])
    assert config_from_arguments(args) == config


def test_flags_override_the_file_and_the_file_overrides_the_defaults(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('budget = "fixed:4"\ntotal_updates = 9\nseed = 2\nenv_kwargs = { split = "train" }\n')
    for argv in (["train", "--config", str(path), "--seed", "5"], ["train", "--seed", "5", "--config", str(path)]):
        config = config_from_arguments(parse_with_config(_parser(), argv))
        assert (config.budget, config.total_updates, config.seed, config.env_kwargs) == \
            ("fixed:4", 9, 5, {"split": "train"})
    assert config_from_arguments(parse_with_config(_parser(), ["train"])) == TrainConfig()  # no file: defaults


def test_eval_and_sft_read_a_config_file_too(tmp_path):
    path = tmp_path / "eval.toml"
    path.write_text('env_id = "KeyDoor-v0"\nts = [2, 4]\ntasks = 3\nenv_kwargs = { split = "test" }\n')
    config = from_arguments(EvalConfig, parse_with_config(_parser(), ["eval", "--config", str(path), "--tasks", "5"]))
    assert (config.env_id, config.ts, config.tasks, config.env_kwargs) == ("KeyDoor-v0", (2, 4), 5, {"split": "test"})
    sft = tmp_path / "sft.toml"
    sft.write_text("steps = 11\n")
    assert config_from_arguments(parse_with_config(_parser(), ["sft", "--config", str(sft)]), SFTConfig).steps == 11


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.toml", "budgte = 'fixed:2'\n", "unknown key 'budgte'"),
    ("bad.toml", "budget = \n", "not valid TOML"),
    ("bad.yaml", "- a\n- b\n", "expected a table of settings"),
    ("missing.toml", None, "cannot read it"),
])
@pytest.mark.parametrize("command", ["train", "sft", "eval"])
def test_a_bad_config_file_is_refused_in_one_line(tmp_path, capsys, command, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exited:
        main([command, "--config", str(path)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and err.count("\n") == 1, err
