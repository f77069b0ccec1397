"""WebShop (Yao et al. 2022) as a Gymnasium text env, offline: a generated product catalog
(or upstream's files), BM25 search with bm25s and upstream's purchase reward.

Modules: :mod:`.env` (the env), :mod:`.pages` (page texts), :mod:`.reward` (upstream's
reward), :mod:`.search` (BM25 / Lucene), :mod:`.catalog` (the data model),
:mod:`.synthetic` + :mod:`.product_types` (the bundled catalog), :mod:`.upstream_data`
(upstream's ``items_*.json``).  Importing this package imports no optional dependency.
"""

from agentgym_budget.envs.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]
