"""The WebShop catalog: products, their purchase prices and the goals (instructions).

Products and goals are plain dicts in the schema upstream WebShop's engine uses after
loading (``web_agent_site/engine/engine.py::load_products`` and ``goal.py::get_goals``), so
the reward port in :mod:`agentgym_budget.envs.webshop.reward` reads them unchanged:

* product: ``asin``, ``name`` (= ``Title``), ``Title``, ``category``, ``query``,
  ``product_category`` (breadcrumb joined by ``" › "``), ``Description``, ``BulletPoints``
  (list), ``Attributes`` (list), ``options`` (``{option name: [values]}``, lower case),
  ``pricing`` (``[price]`` or ``[low, high]``), ``Price`` (the shown tag), ``Reviews``
  (``[{title, score, body}]``), ``Rating``;
* goal: ``asin``, ``name``, ``category``, ``query``, ``product_category``,
  ``instruction_text``, ``attributes``, ``goal_options`` (a dict for synthetic goals, a list
  of strings for human goals), ``price_upper``, ``weight``.

Two sources fill it: :func:`agentgym_budget.envs.webshop.synthetic.generate_catalog` (the
bundled, generated catalog) and :func:`agentgym_budget.envs.webshop.upstream_data.load_upstream_catalog`
(the real ``items_*.json`` files).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import random

__all__ = ["NO_PRICE_LIMIT", "PRICE_RANGE", "Catalog", "draw_prices", "price_upper_for", "search_document"]

#: Upstream's price thresholds for instructions: $10, $20, ..., $990 (``goal.py::PRICE_RANGE``).
PRICE_RANGE: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))
#: ``price_upper`` of a goal without a price limit (upstream uses 1,000,000).
NO_PRICE_LIMIT: float = 1_000_000.0

Product = dict[str, Any]
Goal = dict[str, Any]


def price_upper_for(price: float, rng: random.Random) -> tuple[float, str]:
    """Upstream's price limit for a goal: the larger of two of the next four thresholds.

    Returns ``(price_upper, price_text)`` where ``price_text`` is the instruction suffix
    (``", and price lower than 40.00 dollars"``) or ``""`` when the product is too
    expensive for a threshold (then ``price_upper`` is :data:`NO_PRICE_LIMIT`).
    """
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_LIMIT, ""
    upper = max(rng.sample(candidates, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def search_document(product: Product) -> str:
    """The text upstream indexes for a product (``search_engine/convert_product_file_format.py``):
    title, description, first bullet point and the options, lower-cased."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullets = product["BulletPoints"]
    return " ".join([product["Title"], product["Description"], bullets[0] if bullets else "", option_text]).lower()


@dataclass
class Catalog:
    """Products (by ASIN), the price each one is bought at, and the goals.

    ``prices[asin]`` is the single price the reward compares with ``price_upper``: the
    product's price, or for a price range a value drawn once, uniformly in the range, as
    upstream's ``generate_product_prices`` does (here from a seeded generator).
    """

    products: list[Product]
    prices: dict[str, float]
    goals: list[Goal]
    source: str  # "synthetic(seed=..., n=...)" or the catalog path, for messages and caching
    by_asin: dict[str, Product] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}
        unknown = [g["asin"] for g in self.goals if g["asin"] not in self.by_asin]
        if unknown:
            raise ValueError(f"{len(unknown)} goals name products not in the catalog (e.g. {unknown[0]!r})")
        if not self.goals:
            raise ValueError(f"the catalog {self.source} has no goals (instructions)")

    def __len__(self) -> int:
        return len(self.products)

    def documents(self) -> list[str]:
        """Search documents, in the order of :attr:`products`."""
        return [search_document(p) for p in self.products]


def draw_prices(products: Sequence[Product], rng: random.Random) -> dict[str, float]:
    """One purchase price per product (a range is sampled uniformly, as upstream does)."""
    prices: dict[str, float] = {}
    for product in products:
        pricing = product["pricing"]
        if not pricing:
            prices[product["asin"]] = 100.0
        elif len(pricing) == 1:
            prices[product["asin"]] = float(pricing[0])
        else:
            prices[product["asin"]] = float(rng.uniform(pricing[0], pricing[1]))
    return prices
