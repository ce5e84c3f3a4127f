"""WebShop's pages and clicks, rendered straight to the text the text environment shows.

WebShop renders HTML pages and `WebAgentTextEnv` turns them into text (`observation_mode=
"text"`: the visible strings joined by " [SEP] ") and into the available actions
(`{"has_search_bar": ..., "clickables": [...]}`: the lower-cased button texts, then product links
(ASINs), then option values). `Browser` keeps one session's state as WebShop's `SimServer` does
and produces the same strings without HTML:

- search page: `WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search`, with a search bar;
- results (10 a page of the top 50 hits): `Instruction: [SEP] ... [SEP] Back to Search [SEP]
  Page 1 (Total results: 50) [SEP] Next > [SEP] <ASIN> [SEP] <title> [SEP] <price> ...`;
- item page: `... Back to Search [SEP] < Prev [SEP] <group> [SEP] <value> ... [SEP] <title> [SEP]
  Price: $x [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now`;
- Description / Features / Reviews pages, each with Back to Search and < Prev.

Actions are `search[keywords]` (from any page, as in WebShop) and `click[value]` with a value
among the clickables; anything else changes nothing. `< Prev` goes from results to the previous
page, from an item back to its results, from a sub page back to the item; `Buy Now` ends the
episode with WebShop's reward.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from environments.webshop.reward import get_reward
from environments.webshop.search import SearchEngine
from environments.webshop.vocabulary import noun_words

END_BUTTON = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
SUB_PAGES = ("Description", "Features", "Reviews")
PRODUCT_WINDOW = 10


class Shop:
    """What all sessions share: the products, their search index and the noun lexicon."""

    def __init__(self, products: list[dict[str, Any]], brands: list[str]) -> None:
        self.products = products
        self.by_asin = {p["asin"]: p for p in products}
        self.search_engine = SearchEngine(products)
        self.nouns = noun_words(brands)

    def search(self, keywords: str) -> list[str]:
        return [self.products[i]["asin"] for i in self.search_engine.search(keywords)]


@dataclasses.dataclass(frozen=True)
class Clickable:
    kind: str          # "button" | "product" | "option"
    value: str         # button text, ASIN, or option value
    group: str = ""    # the option group of an option


@dataclasses.dataclass
class Page:
    kind: str                              # "search" | "results" | "item" | "sub" | "done"
    texts: list[str]
    clickables: dict[str, Clickable]


def parse_action(action: str) -> tuple[str, str | None]:
    """WebShop's `re.match(r"(.+)\\[(.+)\\]", action)` as (name, argument), in linear time.

    The regex backtracks quadratically (`"[" * 100_000` froze a worker for ~20 s). Its answer,
    on the first line (`.` stops at a newline): the argument ends at the line's last `]`, and
    starts after the last `[` that leaves a name of at least one character before it and an
    argument of at least one character after it. No such pair: (action, None).
    """
    line = action.split("\n", 1)[0]
    close = line.rfind("]")
    open_ = line.rfind("[", 1, close - 1) if close >= 3 else -1
    if open_ == -1:
        return action, None
    return line[:open_], line[open_ + 1:close]


class Browser:
    """One shopping session: the goal, the current page and what has been chosen so far."""

    def __init__(self, shop: Shop, goal: dict[str, Any]) -> None:
        self.shop = shop
        self.goal = goal
        self.instruction = goal["instruction_text"]
        self.keywords = ""
        self.results: list[str] = []
        self.page_number = 1
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.reward = 0.0
        self.reward_info: dict[str, Any] = {}
        self.page = self._search_page()

    # What the agent sees. -------------------------------------------------------------------

    @property
    def observation(self) -> str:
        return " [SEP] ".join(self.page.texts)

    def available_actions(self) -> dict[str, Any]:
        return {"has_search_bar": self.page.kind == "search",
                "clickables": list(self.page.clickables)}

    # What the agent does. -------------------------------------------------------------------

    def step(self, action: str) -> tuple[str, float, bool]:
        """Runs `search[...]` or `click[...]`; returns (observation, reward, done)."""
        name, argument = parse_action(action)
        argument = argument.lower() if argument is not None else None
        done = False
        if name == "search" and argument:
            self._search(argument)
        elif (name == "click" and argument in self.page.clickables
              and argument != "search"):
            done = self._click(self.page.clickables[argument])
        return self.observation, (self.reward if done else 0.0), done

    def _search(self, keywords: str, page_number: int = 1) -> None:
        self.keywords = keywords
        self.results = self.shop.search(keywords)
        self.page_number = page_number
        self.asin, self.options = None, {}
        self.page = self._results_page()

    def _click(self, clickable: Clickable) -> bool:
        kind, value = clickable.kind, clickable.value
        if kind == "button" and value == END_BUTTON:
            self._buy()
            return True
        if kind == "button" and value == BACK_TO_SEARCH:
            self.keywords, self.results, self.asin, self.options = "", [], None, {}
            self.page = self._search_page()
        elif kind == "button" and value == NEXT_PAGE and self.page.kind == "results":
            self.page_number += 1
            self.page = self._results_page()
        elif kind == "button" and value == PREV_PAGE and self.page.kind == "results":
            self.page_number -= 1
            self.page = self._results_page()
        elif kind == "button" and value == PREV_PAGE and self.page.kind == "sub":
            self.page = self._item_page()
        elif kind == "button" and value == PREV_PAGE and self.page.kind == "item":
            self.asin, self.options = None, {}   # WebShop re-renders the results afresh
            self.page = self._results_page()
        elif kind == "button" and value in SUB_PAGES:
            self.page = self._sub_page(value)
        else:
            if kind == "product":
                self.asin = value
            elif kind == "option":
                self.options[clickable.group] = value
            self.page = self._item_page()
        return False

    def _buy(self) -> None:
        product = self.shop.by_asin[self.asin]
        self.reward, self.reward_info = get_reward(product, self.goal, price=product["price"],
                                                   options=self.options, nouns=self.shop.nouns)
        self.reward_info = {**self.reward_info, "asin": self.asin, "options": dict(self.options)}
        self.page = Page("done", ["Thank you for shopping with us!",
                                  "Your score (min 0.0, max 1.0)", str(self.reward)], {})

    # Pages. ---------------------------------------------------------------------------------

    def _search_page(self) -> Page:
        return Page("search", ["WebShop", "Instruction:", self.instruction, "Search"],
                    {"search": Clickable("button", "Search")})

    def _header(self) -> list[str]:
        return ["Instruction:", self.instruction, BACK_TO_SEARCH]

    def _results_page(self) -> Page:
        total = len(self.results)
        start = (self.page_number - 1) * PRODUCT_WINDOW
        shown = self.results[start:start + PRODUCT_WINDOW]
        buttons = [BACK_TO_SEARCH]
        texts = [*self._header(), f"Page {self.page_number} (Total results: {total})"]
        if self.page_number > 1:
            buttons.append(PREV_PAGE)
        if self.page_number * PRODUCT_WINDOW < total:
            buttons.append(NEXT_PAGE)
        texts += buttons[1:]
        clickables = {b.lower(): Clickable("button", b) for b in buttons}
        for asin in shown:
            product = self.shop.by_asin[asin]
            texts += [asin, product["Title"], product["Price"]]
            clickables[asin.lower()] = Clickable("product", asin)
        return Page("results", texts, clickables)

    def _item_page(self) -> Page:
        product = self.shop.by_asin[self.asin]
        texts = [*self._header(), PREV_PAGE]
        buttons = [BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, END_BUTTON]
        clickables = {b.lower(): Clickable("button", b) for b in buttons}
        for group, values in product["options"].items():
            texts += [group, *values]
            for value in values:
                clickables[value] = Clickable("option", value, group)
        texts += [product["Title"], f"Price: {product['Price']}",
                  f"Rating: {product['Rating']}", *SUB_PAGES, END_BUTTON]
        return Page("item", texts, clickables)

    def _sub_page(self, name: str) -> Page:
        product = self.shop.by_asin[self.asin]
        if name == "Description":
            content = [product["Description"]]
        elif name == "Features":
            content = list(product["BulletPoints"]) or ["No Features"]
        else:
            content = [text for review in product["Reviews"]
                       for text in (f'"{review["title"]}"', str(review["score"]),
                                    review["body"])] or ["No reviews found"]
        buttons = [BACK_TO_SEARCH, PREV_PAGE]
        return Page("sub", [*self._header(), PREV_PAGE, *content],
                    {b.lower(): Clickable("button", b) for b in buttons})
