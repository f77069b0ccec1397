"""WebShop's product search: BM25 over the catalog, with bm25s (default) or Lucene/pyserini.

Upstream WebShop searches a pyserini (Java Lucene) BM25 index of each product's title,
description, first bullet point and options, and shows the top 50 hits.  The default
engine here is the same ranking function in pure Python:

* **bm25s** (``BM25(method="lucene")``) scores with Lucene's BM25 variant, stores the index
  as a scipy sparse matrix and answers a query over a few thousand products in about a
  millisecond; it indexes 3,000 products in well under a second and the 1.18M-product
  catalog in minutes, and can save/load its index.  ``rank-bm25`` was the alternative: it
  re-scores every document in Python for every query (no inverted index), several times
  slower per query and more so as the catalog grows (measured: docs/webshop.md,
  ``benchmarks/webshop_bm25_engines.py``), and keeps no index on disk.
* analysis follows Lucene's English analyzer as pyserini uses it: lower case, English stop
  words, Porter stemming (PyStemmer's ``porter``), with Anserini's default ``k1=0.9``,
  ``b=0.4``;
* like Lucene, only documents that share a term with the query are hits (bm25s itself
  also returns zero-score documents to fill ``k``).

:class:`LuceneSearch` wraps pyserini's ``LuceneSearcher`` for users who have pyserini
(and Java) and upstream's index; it is not installed by any extra.

Example:
    >>> engine = BM25Search(["red running shoes", "blue office chair", "red chair"], ["A", "B", "C"])
    >>> engine.search("red chair", k=50)
    ['C', 'B', 'A']
    >>> engine.search("zebra", k=50)
    []
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from agentgym_budget._optional import MissingBackendError, require

__all__ = ["BM25Search", "LuceneSearch", "SearchEngine"]


class SearchEngine(Protocol):
    """Anything that returns the ASINs of the best ``k`` products for a query, best first."""

    def search(self, query: str, k: int) -> list[str]: ...


class BM25Search:
    """BM25 (Lucene variant) over product documents with :mod:`bm25s`.

    Args:
        documents: one text per product (see :func:`~agentgym_budget.envs.webshop.catalog.search_document`).
        asins: the product id of each document.
        k1, b: BM25 parameters (Anserini's defaults).
        index_dir: where to save the index after building it, and to load it from when it
            is already there (worth it for large catalogs; the bundled one builds in < 1 s).
    """

    def __init__(
        self,
        documents: Sequence[str],
        asins: Sequence[str],
        k1: float = 0.9,
        b: float = 0.4,
        index_dir: str | Path | None = None,
    ) -> None:
        if len(documents) != len(asins):
            raise ValueError(f"got {len(documents)} documents but {len(asins)} asins")
        if not documents:
            raise ValueError("cannot search an empty catalog")
        self._bm25s = require("bm25s", "webshop", "WebShop's search engine")
        stemmer_module = require("Stemmer", "webshop", "WebShop's search engine (PyStemmer)")
        self._stemmer = stemmer_module.Stemmer("porter")
        self.asins = list(asins)
        index_path = Path(index_dir) if index_dir is not None else None
        if index_path is not None and (index_path / "params.index.json").exists():
            self._retriever = self._bm25s.BM25.load(str(index_path))
        else:
            self._retriever = self._bm25s.BM25(k1=k1, b=b, method="lucene")
            self._retriever.index(self._tokenize(list(documents), return_ids=True), show_progress=False)
            if index_path is not None:
                index_path.mkdir(parents=True, exist_ok=True)
                self._retriever.save(str(index_path))

    def _tokenize(self, texts: list[str], return_ids: bool) -> Any:
        return self._bm25s.tokenize(
            texts, stopwords="en", stemmer=self._stemmer, return_ids=return_ids, show_progress=False
        )

    def search(self, query: str, k: int) -> list[str]:
        tokens = self._tokenize([query.lower()], return_ids=False)
        if not tokens[0]:
            return []
        k = min(k, len(self.asins))
        documents, scores = self._retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [self.asins[int(d)] for d, s in zip(documents[0], scores[0]) if s > 0]


class LuceneSearch:
    """Upstream's engine: pyserini's ``LuceneSearcher`` over an index built by upstream's
    ``search_engine/run_indexing.sh`` (documents whose raw JSON has the ASIN as ``id``)."""

    def __init__(self, index_dir: str | Path) -> None:
        try:
            from pyserini.search.lucene import LuceneSearcher
        except ImportError as e:
            raise MissingBackendError(
                f"search_engine='lucene' needs pyserini and Java 21 ({e}); install them with "
                "`pip install pyserini` (not part of any agentgym-budget extra), or use the default "
                "search_engine='bm25s'"
            ) from e
        if not Path(index_dir).exists():
            raise FileNotFoundError(f"Lucene index directory {index_dir} does not exist")
        self._searcher = LuceneSearcher(str(index_dir))

    def search(self, query: str, k: int) -> list[str]:
        hits = self._searcher.search(query, k=k)
        return [json.loads(self._searcher.doc(hit.docid).raw())["id"] for hit in hits]
