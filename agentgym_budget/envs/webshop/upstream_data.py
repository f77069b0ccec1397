"""Load upstream WebShop's data files (``items_shuffle*.json`` and friends) into a :class:`Catalog`.

Point the env at the files from upstream's ``setup.sh`` (they are not bundled: the full
catalog is about 5 GB):

* ``catalog_path``: ``items_shuffle_1000.json`` or ``items_shuffle.json`` — a JSON list of
  scraped products (``asin``, ``name``, ``full_description``, ``small_description``,
  ``pricing`` such as ``"$12.99"`` or ``"$12.99 - $15.99"``, ``customization_options``,
  ``category``, ``query``, ``product_category``);
* ``goals_path``: ``items_human_ins.json`` — ``{asin: [{instruction, instruction_attributes,
  instruction_options}, ...]}``, the 12,087 human instructions (upstream ``human_goals=1``);
* ``attributes_path`` (optional): ``items_ins_v2_1000.json`` / ``items_ins_v2.json`` —
  ``{asin: {attributes, instruction, instruction_attributes}}``; gives products their
  ``Attributes`` (else ``["DUMMY_ATTR"]``, as upstream) and, without ``goals_path``, the
  synthetic goals (one per option combination, upstream ``human_goals=0``);
* ``reviews_path`` (optional): ``reviews.json`` — ``[{asin, reviews, average_rating}]``.

Parsing follows upstream's ``engine.py::load_products`` (same field clean-up, option values
lower-cased with ``/`` shown as ``" | "``, ASINs longer than 10 characters or ``"nan"``
skipped, duplicates dropped) and ``goal.py::get_*_goals``; goals are shuffled with
upstream's seed 233, so goal ``i`` is upstream's session ``i`` (the first 500 human goals
are the usual test split).  Random draws upstream leaves unseeded (the price of a product
sold at a price range, the price limit of each goal) come from a generator seeded with
``seed`` here.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path
from typing import Any

from agentgym_budget.envs.webshop.catalog import Catalog, Goal, Product, draw_prices, price_upper_for

__all__ = ["load_upstream_catalog"]

UPSTREAM_GOAL_SHUFFLE_SEED = 233


def _read_json(path: str | Path, what: str) -> Any:
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"WebShop {what} file {str(path)!r} does not exist")
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def _parse_pricing(raw: str | None) -> tuple[list[float], str]:
    if not raw:
        return [100.0], "$100.0"
    values = []
    for part in raw.split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        try:
            values.append(float(digits))
        except ValueError:
            continue
    if not values:
        return [100.0], "$100.0"
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def _parse_options(raw: dict[str, Any] | None) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for name, contents in (raw or {}).items():
        if contents is None:
            continue
        options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    return options


def _product(raw: dict[str, Any], attributes: dict[str, Any], reviews: dict[str, Any]) -> Product:
    asin = raw["asin"]
    pricing, price_tag = _parse_pricing(raw.get("pricing"))
    bullets = raw.get("small_description") or []
    review_entry = reviews.get(asin, {})
    product_reviews = [
        {
            "title": r.get("title", ""),
            "score": r.get("score", r.get("stars", 0)),
            "body": r.get("body", r.get("review", "")),
        }
        for r in review_entry.get("reviews", [])
    ]
    return {
        "asin": asin,
        "name": raw["name"],
        "Title": raw["name"],
        "category": raw["category"],
        "query": raw["query"].lower().strip(),
        "product_category": raw["product_category"],
        "Description": raw.get("full_description") or "",
        "BulletPoints": bullets if isinstance(bullets, list) else [bullets],
        "Attributes": attributes.get(asin, {}).get("attributes") or ["DUMMY_ATTR"],
        "options": _parse_options(raw.get("customization_options")),
        "pricing": pricing,
        "Price": price_tag,
        "Reviews": product_reviews,
        "Rating": review_entry.get("average_rating", "N.A."),
    }


def _goal_fields(product: Product) -> dict[str, Any]:
    return {k: product[k] for k in ("asin", "category", "query", "name", "product_category")}


def _human_goals(products: list[Product], prices: dict[str, float], human: dict[str, Any], rng: random.Random) -> list[Goal]:
    goals = []
    for product in products:
        for entry in human.get(product["asin"], []):
            if not entry.get("instruction_attributes"):
                continue  # upstream skips instructions without attributes
            price_upper, price_text = price_upper_for(prices[product["asin"]], rng)
            goals.append({
                **_goal_fields(product),
                "instruction_text": entry["instruction"].strip(".") + price_text,
                "attributes": entry["instruction_attributes"],
                "price_upper": price_upper,
                "goal_options": entry.get("instruction_options") or [],
                "weight": 1.0,
            })
    return goals


def _synthetic_goals(products: list[Product], prices: dict[str, float], attributes: dict[str, Any], rng: random.Random) -> list[Goal]:
    goals: list[Goal] = []
    for product in products:
        entry = attributes.get(product["asin"], {})
        if not entry.get("instruction") or not entry.get("instruction_attributes"):
            continue
        price_upper, price_text = price_upper_for(prices[product["asin"]], rng)
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            goal_options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            goals.append({
                **_goal_fields(product),
                "instruction_text": entry["instruction"] + (f" with {option_text}" if option_text else "") + price_text,
                "attributes": entry["instruction_attributes"],
                "price_upper": price_upper,
                "goal_options": goal_options,
            })
    counts: dict[str, int] = {}
    for goal in goals:
        for attribute in goal["attributes"]:
            counts[attribute] = counts.get(attribute, 0) + 1
    for goal in goals:  # upstream weighs rare attributes up
        goal["weight"] = sum(1.0 / counts[a] for a in goal["attributes"]) / len(goal["attributes"])
    return goals


def load_upstream_catalog(
    catalog_path: str | Path,
    goals_path: str | Path | None = None,
    attributes_path: str | Path | None = None,
    reviews_path: str | Path | None = None,
    num_products: int | None = None,
    seed: int = 0,
) -> Catalog:
    """Read upstream WebShop files into a :class:`Catalog` (see the module docstring).

    Raises:
        FileNotFoundError: a given path does not exist.
        ValueError: neither ``goals_path`` nor an ``attributes_path`` with instructions
            gives any goal.
    """
    raw_products = _read_json(catalog_path, "catalog")
    if not isinstance(raw_products, list):
        raise ValueError(f"{catalog_path} should hold a JSON list of products (items_shuffle*.json)")
    attributes = _read_json(attributes_path, "attributes") if attributes_path else {}
    reviews = {r["asin"]: r for r in _read_json(reviews_path, "reviews")} if reviews_path else {}
    if num_products is not None:
        raw_products = raw_products[:num_products]
    seen: set[str] = set()
    products = []
    for raw in raw_products:
        asin = raw.get("asin")
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(_product(raw, attributes, reviews))
    rng = random.Random(seed)
    prices = draw_prices(products, rng)
    if goals_path is not None:
        goals = _human_goals(products, prices, _read_json(goals_path, "goals"), rng)
    elif attributes:
        goals = _synthetic_goals(products, prices, attributes, rng)
    else:
        raise ValueError("loading an upstream catalog needs goals_path (items_human_ins.json) or attributes_path (items_ins_v2*.json)")
    random.Random(UPSTREAM_GOAL_SHUFFLE_SEED).shuffle(goals)
    return Catalog(products, prices, goals, source=str(catalog_path))
