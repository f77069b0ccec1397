"""WebShop's search engine choice, measured: bm25s (what ``BM25Search`` uses) next to rank-bm25, side by side.

Both engines index the same tokens of the bundled catalog (``BM25Search``'s analysis: lower case,
English stop words, Porter stemming) with Anserini's ``k1=0.9``, ``b=0.4``, and answer the same
instruction queries (the rule baseline's: each goal's instruction up to its price clause). Per
query, tokenising and stemming the query is included for both; rank-bm25 (``BM25Okapi``) scores
every document and the top 50 are taken with ``numpy.argpartition``, bm25s answers from its
inverted index (``BM25Search.search``). Index build times include tokenising the corpus, the same
analysis for both. Rounds alternate which engine goes first, so machine load
hits both alike; the median round counts. The top-1 agreement of the two rankings is printed too
(their BM25 variants differ: Lucene's idf vs Okapi's, so the rankings need not agree exactly).

rank-bm25 is not a dependency of any extra: ``pip install rank-bm25`` to run this.

Run:  python benchmarks/webshop_bm25_engines.py [--products 3000] [--queries 300] [--rounds 3] [--json-out FILE]

``--json-out`` writes every figure with the command, commit and machine load
(``benchmarks/provenance.py``); docs/webshop.md's comparison is generated from that file.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.provenance import provenance, write_results  # noqa: E402
from agentgym_budget.envs.webshop.env import SEARCH_RETURN_N  # noqa: E402
from agentgym_budget.envs.webshop.search import BM25Search  # noqa: E402
from agentgym_budget.envs.webshop.synthetic import generate_catalog  # noqa: E402

K1, B = 0.9, 0.4


def cpu_seconds(work: Callable[[], object]) -> tuple[float, object]:
    """CPU seconds of this process spent in ``work()`` (wall time includes waiting for a core), and its result."""
    start = time.process_time()
    result = work()
    return time.process_time() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json-out", default=None, help="write every figure (and provenance) to this JSON file")
    args = parser.parse_args()
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        raise SystemExit("rank-bm25 is not installed (pip install rank-bm25): it is what this script compares with")
    started = provenance(sys.argv)

    catalog = generate_catalog(seed=0, num_products=args.products)
    asins = [p["asin"] for p in catalog.products]
    analyzer = BM25Search(["shoe"], ["A"])  # for its analysis only (tokenizer, stop words, stemmer)
    queries = [g["instruction_text"].split(", and price")[0].lower() for g in catalog.goals[: args.queries]]

    documents = catalog.documents()

    def build_rank_bm25() -> BM25Okapi:
        return BM25Okapi(analyzer._tokenize(list(documents), return_ids=False), k1=K1, b=B)

    def rank_bm25_search(index: BM25Okapi, query: str) -> list[str]:
        tokens = analyzer._tokenize([query], return_ids=False)[0]
        if not tokens:
            return []
        scores = index.get_scores(tokens)
        top = np.argpartition(-scores, SEARCH_RETURN_N)[:SEARCH_RETURN_N]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [asins[i] for i in top if scores[i] > 0]

    build = {"bm25s": [], "rank_bm25": []}
    per_query = {"bm25s": [], "rank_bm25": []}
    bm25s_index: BM25Search | None = None
    okapi: BM25Okapi | None = None
    for round_ in range(args.rounds):
        order = ("bm25s", "rank_bm25") if round_ % 2 == 0 else ("rank_bm25", "bm25s")
        for name in order:
            if name == "bm25s":
                seconds, bm25s_index = cpu_seconds(lambda: BM25Search(documents, asins, k1=K1, b=B))
                build[name].append(seconds)
                seconds, _ = cpu_seconds(lambda: [bm25s_index.search(q, SEARCH_RETURN_N) for q in queries])
            else:
                seconds, okapi = cpu_seconds(build_rank_bm25)
                build[name].append(seconds)
                seconds, _ = cpu_seconds(lambda: [rank_bm25_search(okapi, q) for q in queries])
            per_query[name].append(seconds / len(queries))
    top1_agree = sum(bm25s_index.search(q, SEARCH_RETURN_N)[:1] == rank_bm25_search(okapi, q)[:1]
                     for q in queries) / len(queries)

    median = {name: {"build_cpu_s": statistics.median(build[name]), "query_cpu_ms": 1e3 * statistics.median(per_query[name])}
              for name in build}
    print(f"{len(catalog)} products, {len(queries)} queries, {args.rounds} rounds (median round, CPU time)")
    for name, figures in median.items():
        print(f"{name:<10} index build {figures['build_cpu_s']:.3f} s   per query {figures['query_cpu_ms']:.2f} ms")
    print(f"rank_bm25 / bm25s per query: {median['rank_bm25']['query_cpu_ms'] / median['bm25s']['query_cpu_ms']:.1f}x; "
          f"top-1 agreement {top1_agree:.2f}")
    if args.json_out:
        results = {
            "products": len(catalog), "queries": len(queries), "rounds": args.rounds, "k1": K1, "b": B,
            "versions": {name: importlib.metadata.version(name) for name in ("bm25s", "rank-bm25")},
            "build_cpu_s_by_round": build, "query_cpu_s_by_round": per_query,
            "median": median, "top1_agreement": top1_agree,
        }
        print(f"wrote {write_results(args.json_out, started, results)}")


if __name__ == "__main__":
    main()
