"""``WebShop``: find, configure and buy the product an instruction asks for.

A Gymnasium port of upstream WebShop's text mode (``WebAgentTextEnv(observation_mode="text")``,
Yao et al. 2022) that runs offline on a bundled, generated catalog:

* **pages** (:mod:`~agentgym_budget.envs.webshop.pages`): search -> results (10 per page,
  ``Next >`` / ``< Prev``, ``Back to Search``) -> item (options, ``Description``,
  ``Features``, ``Reviews``, ``Buy Now``) -> done, as ``[SEP]``-joined texts;
* **actions**: ``search[keywords]`` and ``click[name]``, parsed as upstream does (the name
  is matched case-insensitively against the page's clickables; clicking ``Search`` is
  refused).  As in upstream, ``search[...]`` works from any page;
* **catalog** (:mod:`~agentgym_budget.envs.webshop.synthetic`): 3,000 generated products
  in upstream's five categories with one instruction each, or upstream's real files via
  ``catalog_path=`` / ``goals_path=`` (:mod:`~agentgym_budget.envs.webshop.upstream_data`);
* **search**: BM25 with bm25s (default) or pyserini's Lucene (``search_engine="lucene"``);
* **reward** (:mod:`~agentgym_budget.envs.webshop.reward`): upstream's attribute / option /
  price / type score in [0, 1], given once, on ``click[Buy Now]``, which ends the episode
  (``terminated=True``).  Every other step gives 0.  ``won`` is ``reward == 1.0`` (upstream's
  "success rate" counts exactly these episodes); a purchase below 1 is ``lost``.

``info`` adds to the text-env contract: ``task_id`` (the goal's index in the catalog, as a
string), ``page`` (``search``/``results``/``item``/``item_sub``/``done``), ``action_valid``,
``expert_action``/``expert_plan`` (an oracle that searches with a query known to rank the
goal product in the top 50, pages to it, clicks it, chooses the goal options and buys) and,
after a purchase, ``reward_info`` (upstream's score breakdown) and ``purchased``.

``admissible_commands`` are upstream's ``get_available_actions`` as commands: the page's
clickables as ``click[...]`` and, on the search page only (where the search bar is),
``search[...]`` with the expert's query and the goal's product query.  Search is free text,
so any ``search[...]`` is accepted, listed or not.

An action the page cannot take (unknown button, malformed text, empty search) changes
nothing: the observation is ``"Nothing happens."`` followed by the current page, and
``info["action_effect"]`` is ``"invalid"``.  A valid action that leaves the session as it was
(the same search again, an option already chosen) is ``"no_effect"``; otherwise the effect
follows the purchase (won / lost) and the oracle's remaining plan length
(``info["expert_plan_length"]``).

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("WebShop-v0", num_products=300)
    >>> obs, info = env.reset(seed=0)
    >>> obs.startswith("WebShop [SEP] Instruction: [SEP] ")
    True
    >>> for action in info["expert_plan"]:
    ...     obs, reward, terminated, truncated, info = env.step(action)
    >>> reward, terminated, info["won"]
    (1.0, True, True)
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym_budget._once import load_once
from agentgym_budget._optional import require
from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK, TextEnv, action_effect, to_charset
from agentgym_budget.envs.webshop.catalog import Catalog, Goal
from agentgym_budget.envs.webshop.pages import (
    BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, PRODUCTS_PER_PAGE, SEARCH_BUTTON, SUB_PAGES,
    Clickable, done_page, item_page, results_page, search_page, sub_page,
)  # fmt: skip
from agentgym_budget.envs.webshop.reward import FUZZY_THRESHOLD, fuzzy_ratio, get_reward
from agentgym_budget.envs.webshop.search import BM25Search, LuceneSearch, SearchEngine
from agentgym_budget.envs.webshop.synthetic import DEFAULT_NUM_PRODUCTS, generate_catalog
from agentgym_budget.envs.webshop.upstream_data import load_upstream_catalog

__all__ = ["SEARCH_RETURN_N", "SPLITS", "WebShopEnv", "load_shop", "split_goal_indices"]

#: Hits a search returns (upstream ``SEARCH_RETURN_N``).
SEARCH_RETURN_N = 50
SPLITS = ("all", "train", "dev", "test")
_ACTION = re.compile(r"(.+)\[(.+)\]")  # upstream engine.parse_action
PageKind = Literal["search", "results", "item", "item_sub", "done"]


@load_once(maxsize=4)  # built once even when many envs start in threads at once
def load_shop(
    num_products: int = DEFAULT_NUM_PRODUCTS,
    catalog_seed: int = 0,
    catalog_path: str | None = None,
    goals_path: str | None = None,
    attributes_path: str | None = None,
    reviews_path: str | None = None,
    search_engine: str = "bm25s",
    index_dir: str | None = None,
) -> tuple[Catalog, SearchEngine]:
    """The catalog and its search engine, built once per process for each configuration
    (envs of a vector env share them)."""
    require("bm25s", "webshop", "the WebShop env")
    require("rapidfuzz", "webshop", "the WebShop env")
    if catalog_path is None:
        catalog = generate_catalog(seed=catalog_seed, num_products=num_products)
    else:
        catalog = load_upstream_catalog(
            catalog_path, goals_path, attributes_path, reviews_path,
            num_products=None if num_products == DEFAULT_NUM_PRODUCTS else num_products, seed=catalog_seed,
        )  # fmt: skip
    if search_engine == "bm25s":
        engine: SearchEngine = BM25Search(catalog.documents(), [p["asin"] for p in catalog.products], index_dir=index_dir)
    elif search_engine == "lucene":
        if index_dir is None:
            raise ValueError("search_engine='lucene' needs index_dir= (upstream's pyserini index folder)")
        engine = LuceneSearch(index_dir)
    else:
        raise ValueError(f"search_engine must be 'bm25s' or 'lucene', got {search_engine!r}")
    return catalog, engine


def split_goal_indices(num_goals: int, split: str) -> range:
    """Goal indices of a split: upstream's convention (first 500 goals test, next 1,000 dev,
    the rest train), scaled down to 1/6 and 1/3 of the goals for catalogs under 3,000 goals."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    n_test = min(500, num_goals // 6)
    n_dev = min(1000, num_goals // 3)
    return {
        "all": range(num_goals),
        "test": range(n_test),
        "dev": range(n_test, n_test + n_dev),
        "train": range(n_test + n_dev, num_goals),
    }[split]


@dataclass
class _Session:
    """Where the shopper is (upstream's ``user_sessions[session_id]``)."""

    page: PageKind = "search"
    keywords: str | None = None
    results: list[str] = field(default_factory=list)  # all hits of the current search
    page_number: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str | None = None
    reward: float | None = None

    def results_on_page(self) -> list[str]:
        start = (self.page_number - 1) * PRODUCTS_PER_PAGE
        return self.results[start : start + PRODUCTS_PER_PAGE]


class WebShopEnv(TextEnv):
    """WebShop's text mode over a bundled or upstream catalog (see the module docstring).

    Args:
        num_products: size of the generated catalog (ignored with ``catalog_path``, except
            that a non-default value keeps the first ``num_products`` upstream products).
        catalog_seed: seed of the generated catalog and of upstream's unseeded draws.
        split: ``"all"``, ``"train"``, ``"dev"`` or ``"test"`` goals (:func:`split_goal_indices`).
        catalog_path, goals_path, attributes_path, reviews_path: upstream WebShop files
            (default: the ``AGENTGYM_WEBSHOP_CATALOG`` / ``_GOALS`` / ``_ATTRIBUTES`` /
            ``_REVIEWS`` environment variables, else the generated catalog).
        search_engine: ``"bm25s"`` or ``"lucene"`` (pyserini, needs ``index_dir``).
        index_dir: where the BM25 index is saved/loaded (bm25s) or upstream's Lucene index.
        show_attrs: show the ``Attributes`` sub-page button (upstream's ``show_attrs``).
    """

    max_action_length = 256

    def __init__(
        self,
        num_products: int = DEFAULT_NUM_PRODUCTS,
        catalog_seed: int = 0,
        split: str = "all",
        catalog_path: str | os.PathLike[str] | None = None,
        goals_path: str | os.PathLike[str] | None = None,
        attributes_path: str | os.PathLike[str] | None = None,
        reviews_path: str | os.PathLike[str] | None = None,
        search_engine: str = "bm25s",
        index_dir: str | os.PathLike[str] | None = None,
        show_attrs: bool = False,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)

        def path(value: Any, variable: str) -> str | None:
            value = value if value is not None else os.environ.get(variable)
            return os.fspath(value) if value else None

        self.catalog, self.search_engine = load_shop(
            num_products=num_products,
            catalog_seed=catalog_seed,
            catalog_path=path(catalog_path, "AGENTGYM_WEBSHOP_CATALOG"),
            goals_path=path(goals_path, "AGENTGYM_WEBSHOP_GOALS"),
            attributes_path=path(attributes_path, "AGENTGYM_WEBSHOP_ATTRIBUTES"),
            reviews_path=path(reviews_path, "AGENTGYM_WEBSHOP_REVIEWS"),
            search_engine=search_engine,
            index_dir=path(index_dir, "AGENTGYM_WEBSHOP_INDEX"),
        )
        self.split = split
        self.goal_indices = split_goal_indices(len(self.catalog.goals), split)
        if not self.goal_indices:
            raise ValueError(f"the {split!r} split of {self.catalog.source} is empty")
        self.show_attrs = show_attrs
        self._goal_index = -1
        self._goal: Goal = {}
        self._session = _Session()
        self._clickables: dict[str, Clickable] = {}
        self._page_text = ""
        self._expert_query: str | None = None
        self._expert_rank: int | None = None
        self._expert_options: dict[str, str] = {}
        self._search_cache: dict[str, list[str]] = {}
        self._reward_info: dict[str, Any] = {}

    # -- episode ------------------------------------------------------------------------
    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task = options.pop("task", None)
        if options:
            raise ValueError(f"WebShop reset options are 'task' (and 'budget' under TurnBudget), got {sorted(options)}")
        if task is None:
            index = self.goal_indices[int(self.np_random.integers(len(self.goal_indices)))]
        else:
            index = self._task_index(task)
        self._goal_index = index
        self._goal = self.catalog.goals[index]
        self._search_cache = {}
        self._session = _Session()
        self._expert_query, self._expert_rank = self._find_expert_query()
        self._expert_options = self._choose_expert_options()
        self._render()
        return self._page_text, self._info(action_valid=True)

    def _task_index(self, task: Any) -> int:
        try:
            index = int(task)
        except (TypeError, ValueError):
            raise ValueError(f"WebShop task ids are goal indices (int or digit string), got {task!r}") from None
        if index not in self.goal_indices:
            raise ValueError(
                f"task {index} is not in the {self.split!r} split of {self.catalog.source} "
                f"(goal indices {self.goal_indices.start}..{self.goal_indices.stop - 1})"
            )
        return index

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        session = self._session
        if session.page == "done":
            return INVALID_ACTION_FEEDBACK, 0.0, True, self._with_effect(self._info(action_valid=False), None, None)
        before, plan_before = dataclasses.astuple(session), self._plan_length()
        name, argument = self._parse(action)
        valid = True
        if name == "search" and argument:
            self._search(argument)
        elif name == "click" and argument in self._clickables and argument != SEARCH_BUTTON.lower():
            self._click(self._clickables[argument])
        else:
            valid = False
        session = self._session  # "Back to Search" starts a new session
        if session.page == "done":
            reward = float(session.reward or 0.0)
            return self._page_text, reward, True, self._with_effect(self._info(action_valid=True), before, plan_before)
        observation = self._page_text if valid else f"{INVALID_ACTION_FEEDBACK}\n{self._page_text}"
        return observation, 0.0, False, self._with_effect(self._info(action_valid=valid), before, plan_before)

    def _with_effect(self, info: dict[str, Any], before: tuple[Any, ...] | None, plan_before: int | None
                     ) -> dict[str, Any]:
        """``info`` with ``action_effect``: the session (page, search, item, options) is the state."""
        info["action_effect"] = action_effect(
            valid=info["action_valid"], changed=dataclasses.astuple(self._session) != before, won=info["won"],
            lost=info["lost"], plan_before=plan_before, plan_after=info["expert_plan_length"])
        return info

    def _plan_length(self) -> int | None:
        """The oracle's remaining plan length: 0 once won, ``None`` without an oracle or after a lost purchase."""
        session = self._session
        if session.page == "done":
            return 0 if session.reward == 1.0 else None
        return None if self._expert_query is None else len(self._expert_plan())

    @staticmethod
    def _parse(action: str) -> tuple[str, str | None]:
        match = _ACTION.match(action.strip())
        if match is None:
            return action.strip(), None
        name, argument = match.groups()
        return name.strip().lower(), to_charset(argument.strip().lower())

    # -- transitions (upstream SimServer.receive) ----------------------------------------
    def _search(self, keywords: str) -> None:
        session = self._session
        session.keywords = " ".join(keywords.split())
        session.results = self._run_search(session.keywords)
        session.page_number = 1
        self._show_results()

    def _run_search(self, query: str) -> list[str]:
        if query not in self._search_cache:
            self._search_cache[query] = self.search_engine.search(query, k=SEARCH_RETURN_N)
        return self._search_cache[query]

    def _show_results(self) -> None:
        session = self._session
        session.page, session.asin, session.options, session.sub_page = "results", None, {}, None
        self._render()

    def _click(self, target: Clickable) -> None:
        session = self._session
        label = target.label
        if target.kind == "product":
            session.page, session.asin = "item", label
        elif target.kind == "option":
            session.page = "item"
            session.options[target.option_name or ""] = label
        elif label == BUY_NOW:
            self._buy()
            return
        elif label == BACK_TO_SEARCH:
            self._session = _Session()
        elif label == NEXT_PAGE:
            session.page_number += 1
            self._show_results()
            return
        elif label == PREV_PAGE and session.page == "results":
            session.page_number -= 1
            self._show_results()
            return
        elif label == PREV_PAGE and session.page == "item_sub":
            session.page, session.sub_page = "item", None
        elif label == PREV_PAGE and session.page == "item":
            self._show_results()
            return
        elif label in SUB_PAGES:
            session.page, session.sub_page = "item_sub", label
        self._render()

    def _buy(self) -> None:
        session = self._session
        product = self.catalog.by_asin[session.asin or ""]
        reward, details = get_reward(
            product, self._goal, price=self.catalog.prices[product["asin"]], options=session.options, verbose=True
        )
        session.page, session.reward = "done", float(reward)
        self._reward_info = details
        self._render()

    def _render(self) -> None:
        session, instruction = self._session, self._goal["instruction_text"]
        if session.page == "search":
            page = search_page(instruction)
        elif session.page == "results":
            products = [self.catalog.by_asin[a] for a in session.results_on_page()]
            page = results_page(instruction, products, session.page_number, len(session.results))
        elif session.page == "item":
            page = item_page(instruction, self.catalog.by_asin[session.asin or ""], self.show_attrs)
        elif session.page == "item_sub":
            page = sub_page(instruction, self.catalog.by_asin[session.asin or ""], session.sub_page or "")
        else:
            page = done_page(session.asin or "", session.options, session.reward or 0.0)
        self._page_text = page[0]
        # Keys in the observation charset, so that what the agent reads it can click.
        self._clickables = {to_charset(key): clickable for key, clickable in page[1].items()}

    # -- info, admissible commands, expert ------------------------------------------------
    def _info(self, action_valid: bool) -> dict[str, Any]:
        session = self._session
        done = session.page == "done"
        won = done and session.reward == 1.0
        plan = self._expert_plan()
        info: dict[str, Any] = {
            "admissible_commands": self._admissible_commands(),
            "won": won,
            "lost": done and not won,
            "task": self._goal["instruction_text"],
            "task_id": str(self._goal_index),
            "page": session.page,
            "action_valid": action_valid,
            "expert_action": plan[0] if plan else None,
            "expert_plan": plan,
            "expert_plan_length": self._plan_length(),
        }
        if done:
            info["reward_info"] = self._reward_info
            info["purchased"] = {"asin": session.asin, "options": dict(session.options)}
        return info

    def _admissible_commands(self) -> list[str]:
        commands = []
        if self._session.page == "search":
            queries = [self._expert_query, self._goal["query"]]
            commands += [f"search[{q}]" for q in dict.fromkeys(q for q in queries if q)]
        commands += [f"click[{to_charset(c.label)}]" for key, c in self._clickables.items() if key != SEARCH_BUTTON.lower()]
        return commands

    def _find_expert_query(self) -> tuple[str | None, int | None]:
        """A query whose top 50 holds the goal product, and the product's rank in it.

        Tries the instruction without its option and price clauses, the goal's product
        query, then the product title."""
        goal, title = self._goal, self.catalog.by_asin[self._goal["asin"]]["Title"]
        instruction = goal["instruction_text"].split(", and price lower than")[0]
        if isinstance(goal["goal_options"], dict) and goal["goal_options"]:
            instruction = instruction.rsplit(" with ", 1)[0]  # the appended option clause
        for query in (instruction, goal["query"], title):
            query = " ".join(query.lower().split())
            hits = self._run_search(query)
            if goal["asin"] in hits:
                return query, hits.index(goal["asin"])
        return None, None

    def _choose_expert_options(self) -> dict[str, str]:
        """The option value to pick for each of the goal product's option names."""
        product, wanted = self.catalog.by_asin[self._goal["asin"]], self._goal["goal_options"]
        if isinstance(wanted, dict):
            return {name: value for name, value in wanted.items() if value in product["options"].get(name, [])}
        chosen = {}
        for name, values in product["options"].items():  # human goals: option texts, fuzzy-matched
            best = max(values, key=lambda v: max((fuzzy_ratio(w, v) for w in wanted), default=0), default=None)
            if best is not None and any(fuzzy_ratio(w, best) > FUZZY_THRESHOLD for w in wanted):
                chosen[name] = best
        return chosen

    def _expert_plan(self) -> list[str]:
        """The oracle's remaining actions from the current page ([] when it has none)."""
        session, goal_asin = self._session, self._goal["asin"]
        if session.page == "done" or self._expert_query is None or self._expert_rank is None:
            return []
        target_page = self._expert_rank // PRODUCTS_PER_PAGE + 1
        options = [f"click[{to_charset(v)}]" for n, v in self._expert_options.items() if session.options.get(n) != v or session.asin != goal_asin]
        buy = [*options, f"click[{BUY_NOW}]"]
        from_search = [f"search[{self._expert_query}]", *[f"click[{NEXT_PAGE}]"] * (target_page - 1), f"click[{goal_asin}]", *buy]
        back = [f"click[{BACK_TO_SEARCH}]", *from_search]
        if session.page == "search":
            return from_search
        if session.page == "results":
            if goal_asin in session.results_on_page():
                return [f"click[{goal_asin}]", *buy]
            if session.keywords == self._expert_query:
                step = NEXT_PAGE if session.page_number < target_page else PREV_PAGE
                return [f"click[{step}]"] * abs(target_page - session.page_number) + [f"click[{goal_asin}]", *buy]
            return back
        if session.asin == goal_asin:
            return ([f"click[{PREV_PAGE}]"] if session.page == "item_sub" else []) + buy
        if session.page == "item" and goal_asin in session.results_on_page():
            return [f"click[{PREV_PAGE}]", f"click[{goal_asin}]", *buy]
        return back
