"""WebShop reward port (upstream goal.py) and the generated catalog's invariants."""

from __future__ import annotations

import pytest

from agentgym_budget.envs.registration import family_of

pytestmark = pytest.mark.skipif(
    not family_of("WebShop-v0").installed,
    reason="WebShop extra not installed (pip install 'agentgym-budget[webshop]')",
)

from agentgym_budget.envs.webshop.catalog import NO_PRICE_LIMIT, PRICE_RANGE, price_upper_for  # noqa: E402
from agentgym_budget.envs.webshop.product_types import PRODUCT_TYPES  # noqa: E402
from agentgym_budget.envs.webshop.reward import get_reward, normalize_color, title_nouns  # noqa: E402
from agentgym_budget.envs.webshop.search import BM25Search  # noqa: E402
from agentgym_budget.envs.webshop.synthetic import generate_catalog  # noqa: E402


def make_product(**overrides):
    product = {
        "asin": "B0TEST0001", "name": "Velora Clip In Hair Extensions", "Title": "Velora Clip In Hair Extensions",
        "query": "hair extensions", "product_category": "Beauty › Hair Care › Hair Extensions",
        "Attributes": ["natural looking", "heat resistant"], "BulletPoints": ["Soft"], "Description": "Nice.",
    }  # fmt: skip
    product.update(overrides)
    return product


def make_goal(**overrides):
    goal = {
        "asin": "B0TEST0001", "name": "Velora Clip In Hair Extensions", "query": "hair extensions",
        "product_category": "Beauty › Hair Care › Hair Extensions", "attributes": ["natural looking"],
        "goal_options": {"color": "jet black", "size": "16 inch"}, "price_upper": 40.0,
    }  # fmt: skip
    goal.update(overrides)
    return goal


RIGHT_OPTIONS = {"color": "jet black", "size": "16 inch"}


def test_exact_purchase_scores_one_with_upstream_breakdown():
    reward, info = get_reward(make_product(), make_goal(), price=30.0, options=RIGHT_OPTIONS, verbose=True)
    assert reward == 1.0
    assert info == {
        "r_type": 1.0, "r_att": 1.0, "w_att": 0.25, "query_match": True, "category_match": True,
        "title_score": 1.0, "r_option": 1.0, "w_option": 0.5, "r_price": True, "w_price": 0.25,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("price", "options", "expected"),
    [
        (50.0, RIGHT_OPTIONS, 3 / 4),  # too expensive
        (30.0, {"color": "jet black"}, 3 / 4),  # one goal option not chosen
        (30.0, {"color": "jet black", "size": "18 inch"}, 3 / 4),  # size is matched exactly
        (30.0, {"color": "natural black", "size": "16 inch"}, 1.0),  # colours reduce to "black"
        (30.0, {"color": "blonde", "size": "16 inch"}, 3 / 4),
        (50.0, {}, 1 / 4),  # only the attribute
    ],
)
def test_partial_purchases(price, options, expected):
    assert get_reward(make_product(), make_goal(), price=price, options=options) == pytest.approx(expected)


def test_attribute_matching_is_fuzzy_then_textual():
    goal = make_goal(attributes=["natural look", "tangle free", "soft"], goal_options={}, price_upper=NO_PRICE_LIMIT)
    # "natural look" ~ "natural looking" (token_set_ratio 89 > 85); "soft" is in the bullets;
    # "tangle free" is nowhere.
    assert get_reward(make_product(), goal, price=1.0, options={}) == pytest.approx(3 / 4)


def test_type_reward_penalises_another_kind_of_product():
    other = make_product(query="deodorant", product_category="Personal Care › Deodorants", name="Fresh Deodorant Stick")
    reward, info = get_reward(other, make_goal(), price=1.0, options=RIGHT_OPTIONS, verbose=True)
    assert info["r_type"] == 0.0 and reward == 0.0
    similar = make_product(query="wigs", product_category="Beauty › Wigs", name="Aurora Hair Extensions Wig")
    reward, info = get_reward(similar, make_goal(), price=1.0, options=RIGHT_OPTIONS, verbose=True)
    assert info["r_type"] == 1.0 and info["title_score"] == pytest.approx(2 / 4)  # hair, extensions


def test_human_goal_options_are_a_list():
    goal = make_goal(goal_options=["jet black", "16 inch"])
    assert get_reward(make_product(), goal, price=30.0, options=RIGHT_OPTIONS) == 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", ""), ("black forest", "black"), ("violet lavender", "lavender"), ("steelivy fuchsia", "fuchsia"),
     ("123alabaster", "alabaster"), ("webshop", "webshop")],
)  # fmt: skip
def test_normalize_color_matches_upstream_suite(text, expected):
    assert normalize_color(text) == expected


def test_title_nouns_drop_stop_words_and_units():
    assert title_nouns("Pack of 2 USB-C Cables, 6 ft, for iPhone") == ["usb", "cables", "iphone"]


def test_price_upper_follows_upstream_rule():
    import random

    rng = random.Random(0)
    for price in (0.5, 9.99, 37.2, 975.0):
        upper, text = price_upper_for(price, rng)
        assert upper in PRICE_RANGE and price < upper <= price + 40
        assert text == f", and price lower than {upper:.2f} dollars"
    assert price_upper_for(985.0, rng) == (NO_PRICE_LIMIT, "")  # only one threshold ($990) left


# -- the generated catalog -------------------------------------------------------------
@pytest.fixture(scope="module")
def catalog():
    return generate_catalog(seed=0, num_products=600)


def test_generation_is_deterministic(catalog):
    again = generate_catalog(seed=0, num_products=600)
    assert again.products == catalog.products and again.goals == catalog.goals and again.prices == catalog.prices
    assert generate_catalog(seed=1, num_products=600).products != catalog.products


def test_catalog_shape(catalog):
    assert len({p["asin"] for p in catalog.products}) == 600
    assert {p["category"] for p in catalog.products} == {"beauty", "electronics", "fashion", "food", "furniture"}
    assert len(catalog.goals) == 600
    with pytest.raises(ValueError, match="at least"):
        generate_catalog(num_products=3)


def test_every_goal_is_satisfiable_by_its_product(catalog):
    for goal in catalog.goals:
        product = catalog.by_asin[goal["asin"]]
        assert set(goal["attributes"]) <= set(product["Attributes"])
        assert catalog.prices[goal["asin"]] <= goal["price_upper"]
        assert get_reward(product, goal, catalog.prices[goal["asin"]], goal["goal_options"]) == 1.0


def test_product_text_never_mentions_what_the_product_lacks(catalog):
    """The reward counts attributes/options found in the text; generated text must not fake them."""
    kinds = {k.query: k for k in PRODUCT_TYPES}
    for product in catalog.products:
        text = " ".join([product["Title"], product["Description"], *product["BulletPoints"]]).lower()
        lacking = [a for a in kinds[product["query"]].attributes if a not in product["Attributes"]]
        values = [v for vs in product["options"].values() for v in vs]
        assert not [phrase for phrase in lacking + values if phrase in text], product["asin"]


def test_bm25_ranks_a_title_search_first(catalog):
    engine = BM25Search(catalog.documents(), [p["asin"] for p in catalog.products])
    hits = [engine.search(p["Title"], k=50) for p in catalog.products[:50]]
    assert sum(h[0] == p["asin"] for h, p in zip(hits, catalog.products[:50])) >= 45
    assert engine.search("the of and", k=50) == []  # stop words only: no hits, like Lucene


def test_bm25_index_round_trips_through_disk(catalog, tmp_path):
    asins = [p["asin"] for p in catalog.products]
    built = BM25Search(catalog.documents(), asins, index_dir=tmp_path / "index")
    loaded = BM25Search(["unused"] * len(asins), asins, index_dir=tmp_path / "index")
    assert loaded.search("wireless mouse silent click", 50) == built.search("wireless mouse silent click", 50)
