"""The bundled WebShop catalog: products and instructions generated from product types.

Nothing is shipped as data: :func:`generate_catalog` builds the catalog from
:data:`~agentgym_budget.envs.webshop.product_types.PRODUCT_TYPES` with a seeded
``random.Random``, so a (seed, size) pair always gives the same catalog, in about a
tenth of a second for a few thousand products (cached per process by the env).  Generating
beats shipping a file here: it keeps the repository small, cannot drift from the code that
reads it, and lets users ask for a bigger or different catalog.

Goals follow upstream's synthetic goals (``goal.py::get_synthetic_goals``): one instruction
built from a subset of the product's attributes, one full option combination appended as
``" with color: red, and size: large"`` and upstream's price clause
(``", and price lower than 40.00 dollars"``), one goal per product.

Example:
    >>> catalog = generate_catalog(seed=0, num_products=300)
    >>> len(catalog), len(catalog.goals)
    (300, 300)
    >>> goal = catalog.goals[0]
    >>> sorted(goal)[:4]
    ['asin', 'attributes', 'category', 'goal_options']
"""

from __future__ import annotations

import random
import string
from typing import TypedDict

from agentgym_budget.envs.webshop.catalog import Catalog, Goal, Product, draw_prices, price_upper_for
from agentgym_budget.envs.webshop.product_types import PRODUCT_TYPES, ProductType

__all__ = ["DEFAULT_NUM_PRODUCTS", "generate_catalog"]

#: Size of the default bundled catalog (upstream's small debug catalog has 1,000).
DEFAULT_NUM_PRODUCTS: int = 3000

_SYLLABLES = ("ar", "bel", "cor", "da", "el", "fin", "ga", "hal", "is", "jo", "ka", "lu", "mo",
              "nor", "or", "pra", "qui", "ro", "sa", "tel", "ur", "va", "wen", "xo", "ya", "zen")
# Filler text must not contain any attribute phrase or option value (the reward counts an
# attribute/option found in the title, bullets or description); generate_catalog checks it.
_DESCRIPTION_FILLERS = (
    "Thank you for choosing our shop.",
    "Please check the listing before you buy.",
    "Our team answers every question within a day.",
    "Each item is checked before it ships.",
    "A simple choice for home, work or travel.",
    "Makes a nice gift for family and friends.",
)
_BULLET_FILLERS = (
    "Satisfaction guaranteed: contact us with any question",
    "Ships in a secure box",
    "Great gift idea",
)
_REVIEW_TITLES = ("Great value", "Works as described", "Not bad", "Would buy again", "Just okay", "Love it")
_REVIEW_BODIES = (
    "Arrived quickly and matches the listing.",
    "Does the job, no complaints so far.",
    "Good for the price.",
    "My second purchase from this shop.",
)
_INSTRUCTION_TEMPLATES = (
    "i need {noun} with {attrs}",
    "i am looking for {noun} featuring {attrs}",
    "find me {noun}: {attrs}",
    "i want to buy {noun} that offers {attrs}",
)


def _join_phrases(phrases: list[str]) -> str:
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = string.ascii_uppercase + string.digits
    while True:
        asin = "B0" + "".join(rng.choices(alphabet, k=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _brand(rng: random.Random) -> str:
    return "".join(rng.choices(_SYLLABLES, k=rng.randint(2, 3))).capitalize()


def _pick(rng: random.Random, pool: tuple[str, ...], low: int, high: int) -> list[str]:
    """``low..high`` distinct items of ``pool``, in pool order (keeps pages tidy)."""
    count = rng.randint(low, min(high, len(pool)))
    chosen = set(rng.sample(range(len(pool)), count))
    return [item for i, item in enumerate(pool) if i in chosen]


def _forbidden_phrases(kind: ProductType, attributes: list[str], options: dict[str, list[str]]) -> list[str]:
    """Phrases that must not appear in a product's text: attributes it lacks, its option values."""
    lacking = [a for a in kind.attributes if a not in attributes]
    return lacking + [v for values in options.values() for v in values]


def _text_fields(rng: random.Random, brand: str, noun: str, attributes: list[str],
                 forbidden: list[str]) -> tuple[str, str, list[str]]:
    """Title, description and bullet points; filler containing a forbidden phrase is dropped."""
    shown = attributes[: rng.randint(1, len(attributes))]
    title = f"{brand} {noun.title()}, " + ", ".join(a.title() for a in shown)

    def clean(texts: list[str]) -> list[str]:
        return [t for t in texts if not any(f in t.lower() for f in forbidden)]

    fillers = clean(rng.sample(_DESCRIPTION_FILLERS, 2))
    description = " ".join([f"{brand} {noun}: {_join_phrases(attributes)}."] + fillers)
    bullets = [f"{a.capitalize()}" for a in attributes] + clean([rng.choice(_BULLET_FILLERS)])
    return title, description, bullets


def _pricing(rng: random.Random, kind: ProductType) -> tuple[list[float], str]:
    low, high = kind.price_range
    price = round(rng.uniform(low, high), 2)
    if rng.random() < 0.7:
        return [price], f"${price}"
    top = round(price * rng.uniform(1.1, 1.6), 2)
    return [price, top], f"${price} to ${top}"


class _Review(TypedDict):
    title: str
    score: int
    body: str


def _reviews(rng: random.Random) -> tuple[list[_Review], float | str]:
    """0 to 3 reviews and their mean score to one decimal (``"N.A."`` without reviews)."""
    reviews: list[_Review] = [
        {"title": rng.choice(_REVIEW_TITLES), "score": rng.randint(2, 5), "body": rng.choice(_REVIEW_BODIES)}
        for _ in range(rng.randint(0, 3))
    ]
    rating = round(sum(r["score"] for r in reviews) / len(reviews), 1) if reviews else "N.A."
    return reviews, rating


def _product(rng: random.Random, kind: ProductType, taken: set[str]) -> Product:
    brand = _brand(rng)
    noun = rng.choice(kind.nouns)
    attributes = _pick(rng, kind.attributes, 2, 4)
    options = {name: _pick(rng, values, 2, 5) for name, values in kind.options.items() if rng.random() < 0.9}
    title, description, bullets = _text_fields(rng, brand, noun, attributes, _forbidden_phrases(kind, attributes, options))
    pricing, price_tag = _pricing(rng, kind)
    reviews, rating = _reviews(rng)
    return {
        "asin": _asin(rng, taken),
        "name": title,
        "Title": title,
        "noun": noun,  # not upstream: the head noun, used to word the instruction
        "category": kind.category,
        "query": kind.query,
        "product_category": kind.breadcrumb,
        "Description": description,
        "BulletPoints": bullets,
        "Attributes": attributes,
        "options": options,
        "pricing": pricing,
        "Price": price_tag,
        "Reviews": reviews,
        "Rating": rating,
    }


def _goal(rng: random.Random, product: Product, price: float) -> Goal:
    attributes = _pick(rng, tuple(product["Attributes"]), 1, 3)
    template = rng.choice(_INSTRUCTION_TEMPLATES)
    instruction = template.format(noun=product["noun"], attrs=_join_phrases(attributes))
    goal_options = {name: rng.choice(product["options"][name]) for name in sorted(product["options"])}
    option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
    price_upper, price_text = price_upper_for(price, rng)
    return {
        "asin": product["asin"],
        "category": product["category"],
        "query": product["query"],
        "name": product["name"],
        "product_category": product["product_category"],
        "instruction_text": instruction + (f" with {option_text}" if option_text else "") + price_text,
        "attributes": attributes,
        "price_upper": price_upper,
        "goal_options": goal_options,
        "weight": 1.0,
    }


def generate_catalog(seed: int = 0, num_products: int = DEFAULT_NUM_PRODUCTS) -> Catalog:
    """Generate ``num_products`` products (evenly over the product types) and one goal each.

    The same ``(seed, num_products)`` always gives the same catalog; goals are shuffled
    with the seed (upstream shuffles its goals with a fixed seed too).
    """
    if num_products < len(PRODUCT_TYPES):
        raise ValueError(f"num_products must be at least {len(PRODUCT_TYPES)} (one per product type), got {num_products}")
    rng = random.Random(seed)
    taken: set[str] = set()
    products = [_product(rng, PRODUCT_TYPES[i % len(PRODUCT_TYPES)], taken) for i in range(num_products)]
    prices = draw_prices(products, rng)
    goals = [_goal(rng, p, prices[p["asin"]]) for p in products]
    rng.shuffle(goals)
    return Catalog(products, prices, goals, source=f"synthetic(seed={seed}, num_products={num_products})")
