"""Upstream WebShop's purchase reward (``web_agent_site/engine/goal.py::get_reward``), ported.

    reward = r_type * (matched attributes + matched options + [price <= price_upper])
                    / (len(goal attributes) + len(goal options) + 1)

* **attributes**: a goal attribute matches when a product attribute is within fuzzy
  ``token_set_ratio > 85`` of it, or when it occurs in the title, bullet points or
  description (substring, lower case);
* **options**: each chosen option matches when it equals a goal option (exact, for
  ``size``) or is fuzzy-close to one (other options), colours first reduced to a base colour
  by ``normalize_color``; or when it occurs in the product text;
* **type** ``r_type``: 1 when the bought product has the goal's query, shares two breadcrumb
  levels, or shares enough of its title's nouns with the goal product's title; 0.5, 0.1 or 0
  otherwise.

What differs from upstream, and why:

* fuzzy matching is ``rapidfuzz.fuzz.token_set_ratio`` with ``default_process`` and the
  score rounded to an integer, which is what ``thefuzz.fuzz.token_set_ratio`` (upstream's
  library, now itself a wrapper of rapidfuzz) returns;
* the title nouns come from :func:`title_nouns`, a stop-word filter over alphabetic tokens,
  instead of spaCy's ``en_core_web_lg`` part-of-speech tags (a 600 MB model that is not
  available offline).  It keeps adjectives too, so ``title_score`` is a fraction of shared
  content words rather than shared nouns; with the same product (the expert) it is 1 either
  way, and ``r_type`` is only below 1 when neither the query nor the breadcrumb matches;
* upstream crashes on a goal without a price limit (``price_upper <= 0``); here the price
  term is then left out of the sum and of the denominator.

Example:
    >>> product = {"query": "shampoo", "product_category": "a › b › c", "name": "Aloe Shampoo",
    ...            "Title": "Aloe Shampoo", "Attributes": ["sulfate free"], "BulletPoints": [],
    ...            "Description": ""}
    >>> goal = {"query": "shampoo", "product_category": "a › b › c", "name": "Aloe Shampoo",
    ...         "attributes": ["sulfate free"], "goal_options": {"size": "8 fl oz"}, "price_upper": 20.0}
    >>> get_reward(product, goal, price=9.5, options={"size": "8 fl oz"})
    1.0
    >>> get_reward(product, goal, price=25.0, options={"size": "16 fl oz"})
    0.3333333333333333
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, overload

from agentgym_budget._optional import require

__all__ = ["COLOR_SET", "EXACT_MATCH_OPTIONS", "FUZZY_THRESHOLD", "fuzzy_ratio", "get_reward", "normalize_color", "title_nouns"]

#: Option names compared exactly rather than fuzzily (upstream ``EXACT_MATCH_OPTS``).
EXACT_MATCH_OPTIONS: frozenset[str] = frozenset({"size"})
#: Fuzzy score a match must exceed (upstream uses ``> 85`` on thefuzz's 0-100 integer scale).
FUZZY_THRESHOLD: int = 85
#: Base colours, in upstream's order (``web_agent_site/engine/normalize.py::COLOR_SET``).
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue",
    "blush", "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper",
    "coral", "cranberry", "cream", "crystal", "dark", "denim", "eggplant", "elephant", "espresso",
    "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green", "grey", "heather",
    "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime",
    "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum",
    "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger",
    "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)  # fmt: skip
_STOPWORDS = frozenset(
    "a an and are as at be by for from in into is it of on or s set the to with without "
    "pack piece pcs count inch inches oz ounce ounces lb lbs pound pounds ft x".split()
)
_WORD = re.compile(r"[a-z]+")


@functools.cache
def _rapidfuzz() -> Any:
    return require("rapidfuzz", "webshop", "the WebShop reward")


def fuzzy_ratio(a: str, b: str) -> int:
    """thefuzz-style ``token_set_ratio``: 0-100, processed strings, rounded to an integer."""
    rapidfuzz = _rapidfuzz()
    return round(rapidfuzz.fuzz.token_set_ratio(a, b, processor=rapidfuzz.utils.default_process))


def normalize_color(text: str) -> str:
    """The first base colour contained in ``text`` (``"black forest"`` -> ``"black"``), else ``text``."""
    for color in COLOR_SET:
        if color in text:
            return color
    return text


def title_nouns(title: str) -> list[str]:
    """Content words of a product title (lower case, alphabetic, no stop words).

    Stands in for upstream's spaCy noun/proper-noun filter (see the module docstring).
    """
    return [w for w in _WORD.findall(title.lower()) if len(w) > 1 and w not in _STOPWORDS]


def _in_product_text(phrase: str, product: Mapping[str, Any]) -> bool:
    return (
        phrase in product["Title"].lower()
        or phrase in " ".join(product["BulletPoints"]).lower()
        or phrase in product["Description"].lower()
    )


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    """``r_type`` and what it was computed from (upstream ``get_type_reward``)."""
    query_match = product["query"] == goal["query"]
    bought_levels = {x.strip() for x in product["product_category"].split("›")}
    goal_levels = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_levels & goal_levels) >= 2
    desired = title_nouns(goal["name"])
    shared = len(set(title_nouns(product["name"])) & set(desired))
    title_score = 0.2 if not desired else shared / len(desired)
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def attribute_matches(product: Mapping[str, Any], goal_attributes: Iterable[str]) -> int:
    """How many goal attributes the product has (upstream ``get_attribute_reward``)."""
    matches = 0
    for wanted in goal_attributes:
        if any(fuzzy_ratio(have, wanted) > FUZZY_THRESHOLD for have in product["Attributes"]):
            matches += 1
        elif _in_product_text(wanted, product):
            matches += 1
    return matches


def option_matches(product: Mapping[str, Any], goal_options: Iterable[str], chosen: Mapping[str, str]) -> int:
    """How many chosen options match a goal option (upstream ``get_option_reward``)."""
    wanted = [normalize_color(o) for o in goal_options]
    matches = 0
    for name, value in chosen.items():
        value = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in wanted
        else:
            matched = any(fuzzy_ratio(w, value) > FUZZY_THRESHOLD for w in wanted)
        if matched or _in_product_text(value, product):
            matches += 1
    return matches


@overload
def get_reward(product: Mapping[str, Any], goal: Mapping[str, Any], price: float, options: Mapping[str, str],
               verbose: Literal[False] = False) -> float: ...
@overload
def get_reward(product: Mapping[str, Any], goal: Mapping[str, Any], price: float, options: Mapping[str, str],
               verbose: Literal[True]) -> tuple[float, dict[str, Any]]: ...
def get_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
    verbose: bool = False,
) -> float | tuple[float, dict[str, Any]]:
    """The reward in [0, 1] for buying ``product`` at ``price`` with ``options`` chosen.

    With ``verbose=True`` also returns upstream's breakdown (``r_type``, ``r_att``, ``w_att``,
    ``r_option``/``w_option`` when the goal has options, ``r_price``/``w_price``).
    """
    goal_options = list(goal["goal_options"].values()) if isinstance(goal["goal_options"], Mapping) else list(goal["goal_options"])
    attributes = list(goal["attributes"])
    has_price = goal["price_upper"] > 0
    n_attr = attribute_matches(product, attributes)
    n_opt = option_matches(product, goal_options, options)
    r_price = price <= goal["price_upper"] if has_price else None
    denominator = len(attributes) + len(goal_options) + (1 if has_price else 0)
    type_info = type_reward(product, goal)
    total = (n_attr + n_opt + (1 if r_price else 0)) / denominator if denominator else 0.0
    total *= type_info["r_type"]
    if not verbose:
        return total
    info: dict[str, Any] = {
        "r_type": type_info["r_type"],
        "r_att": n_attr / len(attributes) if attributes else None,
        "w_att": len(attributes) / denominator if denominator else 0.0,
        "query_match": type_info["query_match"],
        "category_match": type_info["category_match"],
        "title_score": type_info["title_score"],
    }
    if goal_options:
        info["r_option"] = n_opt / len(goal_options)
        info["w_option"] = len(goal_options) / denominator
    if r_price is not None:
        info["r_price"] = r_price
        info["w_price"] = 1 / denominator
    return total, info
