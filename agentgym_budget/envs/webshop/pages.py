"""WebShop's pages as upstream's text mode shows them: visible texts joined by ``" [SEP] "``.

Upstream renders HTML templates and its ``WebAgentTextEnv(observation_mode="text")`` keeps
the visible text nodes, joined with ``" [SEP] "``; the clickables are the buttons, the
product links (ASINs) and the option radio buttons.  These functions produce the same texts
directly (no HTML, no BeautifulSoup), following the templates of the released WebShop
(the version AgentGym and verl-agent ship).  For example, a results page reads

    Instruction: [SEP] i need ... [SEP] Back to Search [SEP] Page 1 (Total results: 50)
    [SEP] Next > [SEP] B09QQLDJ6M [SEP] <title> [SEP] $8.99 [SEP] ...

Differences: empty text nodes (whitespace between tags) are dropped instead of giving
``" [SEP]  [SEP] "``; the purchase page shows the purchase and the score but not the hidden
"Target" block of upstream's page (which would print the goal).

Each function returns ``(text, clickables)``; clickables map the lower-cased name an action
``click[...]`` is matched against to a :class:`Clickable`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "BACK_TO_SEARCH", "BUY_NOW", "NEXT_PAGE", "PREV_PAGE", "PRODUCTS_PER_PAGE", "SEARCH_BUTTON", "SUB_PAGES",
    "Clickable", "done_page", "item_page", "results_page", "search_page", "sub_page",
]  # fmt: skip

BUY_NOW = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
SEARCH_BUTTON = "Search"
#: Sub-pages of an item page (``Attributes`` only with ``show_attrs``).
SUB_PAGES: tuple[str, ...] = ("Description", "Features", "Reviews", "Attributes")
PRODUCTS_PER_PAGE = 10
SEP = " [SEP] "

Product = Mapping[str, Any]


@dataclass(frozen=True)
class Clickable:
    """Something ``click[...]`` can name: a button, a product link or an option value."""

    kind: Literal["button", "product", "option"]
    label: str  # as shown on the page
    option_name: str | None = None


Page = tuple[str, dict[str, Clickable]]


def _buttons(*labels: str) -> dict[str, Clickable]:
    return {label.lower(): Clickable("button", label) for label in labels}


def _header(instruction: str) -> list[str]:
    return ["Instruction:", instruction, BACK_TO_SEARCH]


def search_page(instruction: str) -> Page:
    """The start page (upstream ``search_page.html``): the search bar and its button."""
    return SEP.join(["WebShop", "Instruction:", instruction, SEARCH_BUTTON]), _buttons(SEARCH_BUTTON)


def results_page(instruction: str, products: Sequence[Product], page: int, total: int) -> Page:
    """One page of search results (``results_page.html``): ``< Prev`` from page 2 on,
    ``Next >`` always (as upstream), then ASIN, title and price of each product."""
    texts = [*_header(instruction), f"Page {page} (Total results: {total})"]
    clickables = _buttons(BACK_TO_SEARCH)
    if page > 1:
        texts.append(PREV_PAGE)
        clickables.update(_buttons(PREV_PAGE))
    texts.append(NEXT_PAGE)
    clickables.update(_buttons(NEXT_PAGE))
    for product in products:
        texts += [product["asin"], product["Title"], product["Price"]]
        clickables[product["asin"].lower()] = Clickable("product", product["asin"])
    return SEP.join(texts), clickables


def item_page(instruction: str, product: Product, show_attrs: bool = False) -> Page:
    """A product page (``item_page.html``): options, title, price, rating, sub-page buttons, Buy Now."""
    texts = [*_header(instruction), PREV_PAGE]
    sub_pages = [s for s in SUB_PAGES if show_attrs or s != "Attributes"]
    clickables = _buttons(BACK_TO_SEARCH, PREV_PAGE, *sub_pages, BUY_NOW)
    for name, values in product["options"].items():
        texts.append(name)
        texts += values
        for value in values:
            clickables[value.lower()] = Clickable("option", value, option_name=name)
    texts += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}", *sub_pages, BUY_NOW]
    return SEP.join(texts), clickables


def sub_page(instruction: str, product: Product, name: str) -> Page:
    """Description, Features (bullet points), Reviews or Attributes of a product."""
    texts = [*_header(instruction), PREV_PAGE]
    if name == "Description":
        texts.append(product["Description"])
    elif name == "Features":
        texts += product["BulletPoints"]
    elif name == "Reviews":
        for review in product["Reviews"]:
            texts += [f'"{review["title"]}"', str(review["score"]), review["body"]]
    elif name == "Attributes":
        texts += product["Attributes"]
    else:
        raise ValueError(f"unknown sub-page {name!r}; expected one of {SUB_PAGES}")
    return SEP.join(t for t in texts if t), _buttons(BACK_TO_SEARCH, PREV_PAGE)


def done_page(asin: str, options: Mapping[str, str], reward: float) -> Page:
    """The purchase page (``done_page.html``), with the score; nothing is clickable."""
    texts = [
        "Thank you for shopping with us!", "Your code:", "(Paste it in your MTurk interface.)",
        "Purchased", "asin", asin, "options", json.dumps(dict(options)),
        "Your score (min 0.0, max 1.0)", str(reward),
    ]  # fmt: skip
    return SEP.join(texts), {}
