"""The product types the bundled synthetic WebShop catalog is generated from (data only).

Upstream WebShop scraped Amazon with a few hundred search queries in five categories
(``beauty``, ``electronics``, ``fashion``, ``food``, ``furniture``); each product keeps the
query it was found with (``query``) and its breadcrumb (``product_category``, joined by
``" › "``).  Every :class:`ProductType` here plays the role of one such query: products of a
type share the query, the breadcrumb and the noun of their title, and differ in brand,
attributes (drawn from ``attributes``), options (drawn from ``options``) and price.

Attribute phrases are written the way upstream's ``instruction_attributes`` are
("long lasting", "easy to clean"); none of them is a substring of another type's noun or of
the filler sentences in :mod:`agentgym_budget.envs.webshop.synthetic`, so the reward's
text fallback (an attribute found in the title/description counts as present) only fires
for products that really have the attribute.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PRODUCT_TYPES", "ProductType"]


@dataclass(frozen=True)
class ProductType:
    """One kind of product (an upstream search query) and what its products vary in."""

    category: str
    query: str
    breadcrumb: str
    nouns: tuple[str, ...]  # title head nouns; the first is used in instructions
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price_range: tuple[float, float]


_COLORS = ("black", "white", "grey", "navy blue", "red", "pink", "beige", "dark brown", "olive green", "purple")
_APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # -- beauty ----------------------------------------------------------------------
    ProductType(
        "beauty", "hair extensions",
        "Beauty & Personal Care › Hair Care › Hair Extensions, Wigs & Accessories › Extensions",
        ("clip in hair extensions", "hair extension", "hairpiece"),
        ("natural looking", "heat resistant", "long lasting", "easy to apply", "tangle free",
         "high quality", "synthetic hair", "human hair"),
        {"color": ("jet black", "natural black", "dark brown", "light brown", "blonde", "auburn"),
         "size": ("14 inch", "16 inch", "18 inch", "20 inch", "22 inch")},
        (9.0, 69.0),
    ),
    ProductType(
        "beauty", "deodorant",
        "Beauty & Personal Care › Personal Care › Deodorants & Antiperspirants › Deodorants",
        ("deodorant stick", "deodorant", "natural deodorant"),
        ("aluminum free", "paraben free", "long lasting", "cruelty free", "sensitive skin",
         "vegan", "baking soda free", "travel size"),
        {"scent": ("lavender", "citrus", "unscented", "coconut", "sandalwood", "eucalyptus mint"),
         "size": ("1 pack", "2 pack", "3 pack")},
        (5.0, 29.0),
    ),
    ProductType(
        "beauty", "face moisturizer",
        "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers › Face Moisturizers",
        ("face moisturizer", "facial cream", "moisturizing cream"),
        ("hyaluronic acid", "fragrance free", "dry skin", "oil free", "anti aging",
         "non comedogenic", "dermatologist tested", "natural ingredients"),
        {"size": ("1.7 fl oz", "2.5 fl oz", "3.4 fl oz", "5 fl oz")},
        (8.0, 59.0),
    ),
    ProductType(
        "beauty", "nail polish",
        "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
        ("nail polish", "gel nail polish", "nail lacquer"),
        ("quick drying", "long lasting", "non toxic", "high gloss", "chip resistant",
         "easy to remove", "nail art", "cruelty free"),
        {"color": ("classic red", "nude", "coral", "lilac", "midnight blue", "rose gold", "clear"),
         "size": ("0.5 fl oz", "6 piece set", "12 piece set")},
        (4.0, 35.0),
    ),
    ProductType(
        "beauty", "makeup brushes",
        "Beauty & Personal Care › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
        ("makeup brush set", "makeup brushes", "foundation brush"),
        ("synthetic bristles", "easy to clean", "travel case", "soft bristles",
         "cruelty free", "professional grade", "wooden handle", "high quality"),
        {"color": ("black", "rose gold", "white", "pink", "marble"),
         "size": ("5 piece", "10 piece", "14 piece", "18 piece")},
        (6.0, 45.0),
    ),
    ProductType(
        "beauty", "shampoo",
        "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
        ("shampoo", "clarifying shampoo", "hair shampoo"),
        ("sulfate free", "color safe", "dry scalp", "natural ingredients", "tea tree",
         "paraben free", "hair growth", "curly hair"),
        {"scent": ("argan oil", "coconut", "peppermint", "rosemary", "unscented"),
         "size": ("8 fl oz", "16 fl oz", "33.8 fl oz")},
        (6.0, 39.0),
    ),
    # -- electronics -----------------------------------------------------------------
    ProductType(
        "electronics", "bluetooth headphones",
        "Electronics › Headphones, Earbuds & Accessories › Headphones › Over-Ear Headphones",
        ("bluetooth headphones", "wireless headphones", "over ear headset"),
        ("noise cancelling", "long battery life", "built in microphone", "foldable design",
         "fast charging", "deep bass", "lightweight", "hands free"),
        {"color": ("black", "white", "silver", "navy blue", "rose gold")},
        (19.0, 199.0),
    ),
    ProductType(
        "electronics", "usb c cable",
        "Electronics › Computers & Accessories › Cables & Accessories › Cables › USB Cables",
        ("usb c cable", "charging cable", "usb c charger cord"),
        ("fast charging", "nylon braided", "high speed data transfer", "durable",
         "tangle free", "compatible with iphone", "gold plated", "right angle"),
        {"size": ("3 ft", "6 ft", "10 ft"), "color": ("black", "white", "grey", "red")},
        (5.0, 25.0),
    ),
    ProductType(
        "electronics", "phone case",
        "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        ("phone case", "protective case", "slim case"),
        ("shockproof", "wireless charging compatible", "slim fit", "raised edges",
         "anti scratch", "military grade drop protection", "transparent back", "kickstand"),
        {"color": ("black", "clear", "navy blue", "purple", "pink", "green"),
         "style": ("iphone 13", "iphone 14", "iphone 15", "galaxy s23", "pixel 8")},
        (7.0, 35.0),
    ),
    ProductType(
        "electronics", "bluetooth speaker",
        "Electronics › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
        ("bluetooth speaker", "portable speaker", "wireless speaker"),
        ("waterproof", "long battery life", "stereo sound", "deep bass", "outdoor",
         "built in microphone", "lightweight", "dustproof"),
        {"color": ("black", "ocean blue", "red", "grey", "camo")},
        (15.0, 149.0),
    ),
    ProductType(
        "electronics", "wireless mouse",
        "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Keyboards, Mice & Accessories › Mice",
        ("wireless mouse", "computer mouse", "ergonomic mouse"),
        ("ergonomic design", "silent click", "rechargeable", "usb receiver",
         "adjustable dpi", "plug and play", "long battery life", "lightweight"),
        {"color": ("black", "white", "grey", "pink", "blue")},
        (8.0, 59.0),
    ),
    ProductType(
        "electronics", "hdmi cable",
        "Electronics › Television & Video › Accessories › Cables › HDMI Cables",
        ("hdmi cable", "hdmi cord", "hdmi 2.1 cable"),
        ("4k resolution", "high speed", "gold plated", "nylon braided", "ethernet",
         "plug and play", "durable", "8k resolution"),
        {"size": ("3 ft", "6 ft", "10 ft", "15 ft", "25 ft")},
        (6.0, 39.0),
    ),
    # -- fashion ---------------------------------------------------------------------
    ProductType(
        "fashion", "men's t-shirts",
        "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
        ("t-shirt", "crew neck tee", "cotton tee"),
        ("machine wash", "cotton spandex", "slim fit", "short sleeve", "moisture wicking",
         "relaxed fit", "classic fit", "quick dry"),
        {"color": _COLORS, "size": _APPAREL_SIZES},
        (9.0, 39.0),
    ),
    ProductType(
        "fashion", "women's dresses",
        "Clothing, Shoes & Jewelry › Women › Clothing › Dresses › Casual",
        ("dress", "maxi dress", "sundress"),
        ("machine wash", "loose fit", "long sleeve", "high waist", "button closure",
         "elastic waist", "polyester spandex", "wash cold"),
        {"color": _COLORS, "size": _APPAREL_SIZES},
        (15.0, 69.0),
    ),
    ProductType(
        "fashion", "running shoes",
        "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
        ("running shoes", "sneakers", "athletic shoes"),
        ("non slip", "rubber sole", "lace up", "arch support", "breathable mesh",
         "memory foam", "lightweight", "wide toe box"),
        {"color": ("black", "white", "grey", "navy blue", "red"),
         "size": ("7", "8", "8.5", "9", "9.5", "10", "11", "12")},
        (25.0, 129.0),
    ),
    ProductType(
        "fashion", "women's leggings",
        "Clothing, Shoes & Jewelry › Women › Clothing › Active › Active Leggings",
        ("leggings", "yoga pants", "workout leggings"),
        ("high waist", "tummy control", "butt lift", "squat proof", "moisture wicking",
         "four way stretch", "hand wash", "polyester spandex"),
        {"color": _COLORS, "size": ("small", "medium", "large", "x-large")},
        (12.0, 45.0),
    ),
    ProductType(
        "fashion", "men's jackets",
        "Clothing, Shoes & Jewelry › Men › Clothing › Jackets & Coats › Lightweight Jackets",
        ("jacket", "windbreaker jacket", "bomber jacket"),
        ("water resistant", "zipper closure", "warm lining", "hooded", "windproof",
         "machine wash", "regular fit", "fleece lined"),
        {"color": _COLORS, "size": _APPAREL_SIZES},
        (29.0, 149.0),
    ),
    ProductType(
        "fashion", "women's sandals",
        "Clothing, Shoes & Jewelry › Women › Shoes › Sandals › Flat Sandals",
        ("sandals", "flat sandals", "slide sandals"),
        ("open toe", "ankle strap", "non slip", "rubber sole", "arch support",
         "memory foam", "adjustable buckle", "summer beach"),
        {"color": ("black", "white", "beige", "brown", "gold", "silver"),
         "size": ("6", "6.5", "7", "7.5", "8", "8.5", "9", "10")},
        (15.0, 79.0),
    ),
    # -- food ------------------------------------------------------------------------
    ProductType(
        "food", "coffee beans",
        "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
        ("whole bean coffee", "coffee beans", "roasted coffee"),
        ("medium roast", "dark roast", "fair trade", "usda organic", "single origin",
         "low acid", "non gmo", "kosher certified"),
        {"size": ("12 ounce", "2 pound", "5 pound"),
         "flavor name": ("colombian", "french roast", "espresso", "breakfast blend", "hazelnut")},
        (8.0, 59.0),
    ),
    ProductType(
        "food", "snack bars",
        "Grocery & Gourmet Food › Snack Foods › Bars › Granola Bars",
        ("protein bars", "snack bars", "granola bars"),
        ("gluten free", "high protein", "low sugar", "non gmo", "keto friendly",
         "plant based", "individually wrapped", "dairy free"),
        {"flavor name": ("chocolate chip", "peanut butter", "almond", "blueberry", "sea salt caramel"),
         "size": ("12 count", "24 count", "36 count")},
        (9.0, 49.0),
    ),
    ProductType(
        "food", "herbal tea",
        "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
        ("herbal tea", "tea bags", "loose leaf tea"),
        ("caffeine free", "usda organic", "non gmo", "kosher certified", "sugar free",
         "natural ingredients", "individually wrapped", "gluten free"),
        {"flavor name": ("chamomile", "peppermint", "ginger", "hibiscus", "lemon balm"),
         "size": ("20 count", "40 count", "100 count")},
        (4.0, 29.0),
    ),
    ProductType(
        "food", "olive oil",
        "Grocery & Gourmet Food › Pantry Staples › Cooking Oils, Vinegars & Sprays › Oils › Olive",
        ("extra virgin olive oil", "olive oil", "cooking oil"),
        ("cold pressed", "usda organic", "non gmo", "first cold press", "kosher certified",
         "glass bottle", "single origin", "high polyphenol"),
        {"size": ("16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "1 gallon")},
        (7.0, 49.0),
    ),
    ProductType(
        "food", "gummy candy",
        "Grocery & Gourmet Food › Candy & Chocolate › Gummy Candies",
        ("gummy candy", "gummy bears", "fruit snacks"),
        ("gluten free", "fat free", "vegan", "natural flavors", "individually wrapped",
         "sugar free", "non gmo", "kosher certified"),
        {"flavor name": ("assorted fruit", "sour", "watermelon", "cherry", "tropical"),
         "size": ("1 pound", "2 pound", "5 pound")},
        (5.0, 35.0),
    ),
    ProductType(
        "food", "mixed nuts",
        "Grocery & Gourmet Food › Snack Foods › Nuts & Seeds › Mixed Nuts",
        ("mixed nuts", "trail mix", "roasted nuts"),
        ("lightly salted", "unsalted", "high protein", "non gmo", "keto friendly",
         "resealable bag", "plant based", "gluten free"),
        {"size": ("16 ounce", "2 pound", "3 pound")},
        (8.0, 45.0),
    ),
    # -- furniture -------------------------------------------------------------------
    ProductType(
        "furniture", "coffee table",
        "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables",
        ("coffee table", "center table", "cocktail table"),
        ("easy assembly", "storage shelf", "solid wood", "metal frame", "mid century",
         "rustic", "lift top", "space saving"),
        {"color": ("walnut", "black", "white", "rustic brown", "grey oak")},
        (49.0, 299.0),
    ),
    ProductType(
        "furniture", "office chair",
        "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs › Desk Chairs",
        ("office chair", "desk chair", "ergonomic chair"),
        ("lumbar support", "adjustable height", "mesh back", "swivel", "padded armrests",
         "easy assembly", "high back", "rolling casters"),
        {"color": ("black", "grey", "white", "blue", "pink")},
        (59.0, 349.0),
    ),
    ProductType(
        "furniture", "bookshelf",
        "Home & Kitchen › Furniture › Home Office Furniture › Bookcases",
        ("bookshelf", "bookcase", "storage shelf unit"),
        ("easy assembly", "metal frame", "industrial", "5 tier", "wall mounted",
         "space saving", "solid wood", "anti tip"),
        {"color": ("black", "white", "walnut", "rustic brown", "grey oak"),
         "size": ("3 shelves", "4 shelves", "5 shelves")},
        (35.0, 249.0),
    ),
    ProductType(
        "furniture", "bar stools",
        "Home & Kitchen › Furniture › Game & Recreation Room Furniture › Home Bar Furniture › Barstools",
        ("bar stools", "counter stools", "barstool set"),
        ("adjustable height", "swivel", "footrest", "easy assembly", "faux leather",
         "metal frame", "backless", "set of 2"),
        {"color": ("black", "white", "grey", "brown", "green"),
         "size": ("24 inch", "26 inch", "30 inch")},
        (49.0, 259.0),
    ),
    ProductType(
        "furniture", "nightstand",
        "Home & Kitchen › Furniture › Bedroom Furniture › Nightstands",
        ("nightstand", "bedside table", "end table"),
        ("storage drawer", "easy assembly", "charging station", "solid wood", "mid century",
         "open shelf", "space saving", "metal frame"),
        {"color": ("white", "black", "walnut", "grey", "natural wood")},
        (29.0, 189.0),
    ),
    ProductType(
        "furniture", "memory foam mattress",
        "Home & Kitchen › Furniture › Bedroom Furniture › Mattresses & Box Springs › Mattresses",
        ("memory foam mattress", "mattress", "gel mattress"),
        ("medium firm", "pressure relief", "cooling gel", "certipur us certified",
         "bed in a box", "fiberglass free", "hypoallergenic", "motion isolation"),
        {"size": ("twin", "full", "queen", "king")},
        (129.0, 699.0),
    ),
)
