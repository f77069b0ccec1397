"""A batch's keys and values in preallocated tensors, written in place as the batch decodes.

:class:`BatchKVCache` holds, per layer, one ``[rows, kv_heads, capacity, head_dim]`` tensor of
keys and one of values, allocated once for the whole generation (prompt + the new-token limit),
and hands the model a ``transformers`` ``Cache`` over them: each forward pass copies its new
keys and values into the next columns and attends over a view of the filled ones.  Nothing
grows by concatenation (``DynamicCache`` re-allocates every layer's tensors at every decoded
token), and the attention still only spans the columns written so far.  After each forward
pass the caller counts its columns as written (:meth:`BatchKVCache.advance`).  Rows that finish are
dropped with :meth:`BatchKVCache.keep_rows` (one copy of the survivors, at most once per
finished row), so they stop costing compute.

**Static layout** (``BatchKVCache(..., static=True)``, what a compiled decode step uses, as
transformers' ``StaticCache`` does): a decode step's ``update`` writes its column at
:attr:`BatchKVCache.column`, a tensor, with ``index_copy_`` and returns the whole
``[rows, kv_heads, capacity, head_dim]`` tensors (the caller masks the columns not yet
written).  Every step of a reply then has the same shapes, so ``torch.compile`` traces the
step once instead of once per written column.  The prompt still runs through
:meth:`BatchKVCache.window` as in the default layout.

torch and transformers are imported when a cache is built (extra ``llm``).

Example:
    >>> import torch
    >>> cache = BatchKVCache(capacity=4)
    >>> model_cache = cache.model_cache(layers=1)
    >>> keys, values = model_cache.update(torch.ones(2, 1, 3, 8), torch.ones(2, 1, 3, 8), 0)
    >>> cache.advance(3)
    >>> tuple(keys.shape), cache.length
    ((2, 1, 3, 8), 3)
    >>> cache.keep_rows(torch.tensor([1]))
    >>> keys, _ = model_cache.update(torch.zeros(1, 1, 1, 8), torch.zeros(1, 1, 1, 8), 0)
    >>> tuple(keys.shape), float(keys[0, 0, :, 0].sum())
    ((1, 1, 4, 8), 3.0)

    The static layout: a decode step writes at ``column`` and sees the whole capacity.

    >>> static = BatchKVCache(capacity=4, static=True)
    >>> static.write(0, torch.ones(1, 1, 2, 8), torch.ones(1, 1, 2, 8), start=0)  # a prompt of 2 tokens
    >>> static.advance(2)
    >>> keys, _ = static.model_cache(layers=1).update(torch.full((1, 1, 1, 8), 5.0), torch.ones(1, 1, 1, 8), 0)
    >>> tuple(keys.shape), static.column.tolist(), keys[0, 0, :, 0].tolist()
    ((1, 1, 4, 8), [2], [1.0, 1.0, 5.0, 0.0])
"""

from __future__ import annotations

from typing import Any

from agentgym_budget._optional import require

__all__ = ["BatchKVCache"]


class BatchKVCache:
    """Preallocated keys and values of a batch of rows (see the module docstring).

    Args:
        capacity: the most tokens a row will hold (its prompt columns + decoded tokens fed back).
        rows: the rows to allocate (default: as many as the first write has; a :meth:`window`
            writes only some of them).
        static: its model cache writes each decode step at :attr:`column` and returns the whole
            tensors (:meth:`write_column`), so that the step's shapes do not change as it fills.
    """

    def __init__(self, capacity: int, rows: int | None = None, *, static: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.rows = rows
        self.length = 0  # columns written so far, the same for every row (rows are padded on the left)
        self.static = bool(static)
        # static layout: ``length`` as a [1] tensor, so that a compiled step reads it as an input, not a constant
        self.column: Any = None
        if static:
            torch = require("torch", "llm", "the KV cache")
            self.column = torch.zeros(1, dtype=torch.long)
        self.keys: list[Any] = []  # per layer [rows, kv_heads, capacity, head_dim], allocated at first write
        self.values: list[Any] = []
        self._parent: tuple[BatchKVCache, slice, int] | None = None  # a window's cache, rows and first column
        self.pads: list[int] | None = None  # a window's: per row, how many first input columns are pads (see window)

    def window(self, rows: slice, first_column: int, length: int, pads: list[int] | None = None) -> BatchKVCache:
        """A cache over ``rows`` and the columns from ``first_column`` on, sharing this one's tensors.

        Its model cache writes at column ``length`` of the window (``first_column + length`` here)
        and attends over the window's columns only: part of a batch runs through the model on its
        own, over the columns its rows use, while the keys and values land in the batch's cache.
        ``pads`` (per row): how many of a forward pass's first input columns are pads of that row;
        a write keeps what the cache holds there — a row with fewer new tokens than the window's
        longest keeps its reused prefix in those columns.  Each row's own columns are copied on
        their own: cheaper than a masked ``torch.where`` over the block or a write-then-restore of
        the pads' columns past ~100 columns (tiny model, 4 rows, per layer: 39 vs 253 and 88 us at
        2,000 columns; 24 vs 17 and 36 at 60).

        Example:
            >>> import torch
            >>> cache = BatchKVCache(capacity=4, rows=2)
            >>> part = cache.window(slice(1, 2), first_column=1, length=1)
            >>> keys, _ = part.model_cache(layers=1).update(torch.ones(1, 1, 2, 8), torch.ones(1, 1, 2, 8), 0)
            >>> tuple(keys.shape), cache.keys[0][:, 0, :, 0].tolist()
            ((1, 1, 3, 8), [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])

            Row 0 feeds a pad, then its token: the pad's column keeps what was there.

            >>> part = cache.window(slice(0, 2), first_column=0, length=2, pads=[1, 0])
            >>> _ = part.model_cache(layers=1).update(torch.full((2, 1, 2, 8), 7.0), torch.ones(2, 1, 2, 8), 0)
            >>> cache.keys[0][:, 0, :, 0].tolist()
            [[0.0, 0.0, 0.0, 7.0], [0.0, 0.0, 7.0, 7.0]]
        """
        part = BatchKVCache(self.capacity - first_column)
        part.length, part._parent, part.pads = length, (self, rows, first_column), pads
        return part

    def model_cache(self, layers: int) -> Any:
        """The ``transformers`` ``Cache`` a model's forward pass writes into (one per :class:`BatchKVCache`)."""
        return _model_cache_class()(self, layers)

    def write(self, layer: int, keys: Any, values: Any, start: int, row: int | None = None) -> None:
        """Copy ``keys``/``values`` ``[rows, kv_heads, n, head_dim]`` into columns ``start .. start+n``.

        With ``row``, they are that one row's ``[kv_heads, n, head_dim]`` (allocating needs ``rows``).
        """
        if row is not None and self.rows is None and not self.keys:
            raise ValueError("writing one row first needs the cache's row count: BatchKVCache(capacity, rows=...)")
        self._allocate(layer, keys if row is None else keys[None], values if row is None else values[None])
        end = start + keys.shape[-2]
        if end > self.capacity:
            raise ValueError(f"{end} columns do not fit a cache of capacity {self.capacity}")
        if self.pads is not None and row is None:  # each row's own columns only: its pads keep what is there
            for place, pads in enumerate(self.pads):
                self.keys[layer][place, :, start + pads:end].copy_(keys[place, :, pads:])
                self.values[layer][place, :, start + pads:end].copy_(values[place, :, pads:])
            return
        rows = slice(None) if row is None else row
        self.keys[layer][rows, :, start:end].copy_(keys)
        self.values[layer][rows, :, start:end].copy_(values)

    def advance(self, columns: int) -> None:
        """Count ``columns`` more as written (after a forward pass has written them in every layer)."""
        self.length += int(columns)
        if self.column is not None:
            self.column.fill_(self.length)

    def write_column(self, layer: int, keys: Any, values: Any) -> tuple[Any, Any]:
        """Static layout: copy one column ``[rows, kv_heads, 1, head_dim]`` in at ``column``; the whole tensors.

        The column is a tensor and the tensors returned are always ``[rows, kv_heads, capacity,
        head_dim]``, so every decode step of a reply has the same shapes: a compiled step is traced
        once, not once per token (the caller masks the columns not yet written).
        """
        self._allocate(layer, keys, values)  # no check of ``length`` here: a compiled step would specialise on it
        self.keys[layer].index_copy_(2, self.column, keys)
        self.values[layer].index_copy_(2, self.column, values)
        return self.keys[layer], self.values[layer]

    def filled(self, layer: int) -> tuple[Any, Any]:
        """Views of layer ``layer``'s keys and values written so far ``[rows, kv_heads, length, head_dim]``."""
        return self.keys[layer][:, :, : self.length], self.values[layer][:, :, : self.length]

    def keep_rows(self, rows: Any) -> None:
        """Keep only ``rows`` (a 1-D index tensor), in that order: the others stop costing compute."""
        for layer in range(len(self.keys)):
            self.keys[layer] = self.keys[layer].index_select(0, rows.to(self.keys[layer].device))
            self.values[layer] = self.values[layer].index_select(0, rows.to(self.values[layer].device))

    def _allocate(self, layer: int, keys: Any, values: Any) -> None:
        if layer < len(self.keys) and self.keys[layer] is not None:  # every write after a layer's first
            return
        torch = require("torch", "llm", "the KV cache")
        while len(self.keys) <= layer:
            self.keys.append(None)
            self.values.append(None)
        if self._parent is not None:  # a window: views of the parent's tensors
            parent, rows, first_column = self._parent
            parent._allocate(layer, keys, values)
            self.keys[layer] = parent.keys[layer][rows, :, first_column:]
            self.values[layer] = parent.values[layer][rows, :, first_column:]
        elif self.keys[layer] is None:
            _, heads, _, dim = keys.shape
            n_rows = self.rows if self.rows is not None else keys.shape[0]
            self.keys[layer] = torch.zeros((n_rows, heads, self.capacity, dim), dtype=keys.dtype, device=keys.device)
            self.values[layer] = torch.zeros((n_rows, heads, self.capacity, values.shape[-1]), dtype=values.dtype,
                                             device=values.device)
            if self.column is not None:
                self.column = self.column.to(keys.device)


_CACHE_CLASS: Any = None


def _model_cache_class() -> Any:
    """The ``transformers.Cache`` subclass over a :class:`BatchKVCache`, defined once transformers is imported."""
    global _CACHE_CLASS
    if _CACHE_CLASS is not None:
        return _CACHE_CLASS
    require("transformers", "llm", "the KV cache")  # a missing extra: one line naming it
    from transformers.cache_utils import Cache, DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """One layer of a :class:`BatchKVCache`: ``update`` writes in place and returns the filled views."""

        def __init__(self, store: BatchKVCache, layer: int) -> None:
            super().__init__()
            self.store, self.layer = store, layer
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if self.store.static:  # one decode step: the whole preallocated tensors (see write_column)
                return self.store.write_column(self.layer, key_states, value_states)
            start = self.store.length  # advanced by the caller once every layer has written
            self.store.write(self.layer, key_states, value_states, start)
            end = start + key_states.shape[-2]
            return self.store.keys[self.layer][:, :, :end], self.store.values[self.layer][:, :, :end]

        def get_seq_length(self) -> int:
            return self.store.length

    class PreallocatedCache(Cache):
        def __init__(self, store: BatchKVCache, layers: int) -> None:
            super().__init__(layers=[PreallocatedLayer(store, layer) for layer in range(layers)])

    _CACHE_CLASS = PreallocatedCache
    return _CACHE_CLASS
