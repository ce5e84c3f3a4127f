"""The generated store on disk: products and the goals of both splits, made once and cached.

`load_store(seed)` returns `{"products", "goals": {"train", "test"}, "brands", ...}`. The first
call generates it (about 15,000 products; a few seconds) and writes it as JSON under
`$AGENTRL_JAX_CACHE/webshop` (default `~/.cache/agentrl_jax/webshop`); later calls read that
file. Generation is a pure function of the seed and the sizes, so a deleted cache comes back the
same.

Splits: the goals of the test and the train split ask for different products (the targets are
disjoint), so no test goal is a train goal. AgentBench tests on 200 goals and trains on 11,000.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import tempfile
from typing import Any

from agentrl_jax import cache_dirs
from environments.webshop.goals import make_goal
from environments.webshop.products import make_products
from environments.webshop.vocabulary import make_brands

GENERATOR_VERSION = 1    # bump when generated data changes, so stale caches are not reused
NUM_PRODUCTS = 15_000
TRAIN_GOALS = 12_000
TEST_GOALS = 200
NUM_BRANDS = 800


def cache_root() -> pathlib.Path:
    return cache_dirs.cache_root() / "webshop"


def generate_store(seed: int = 0, num_products: int = NUM_PRODUCTS,
                   train_goals: int = TRAIN_GOALS, test_goals: int = TEST_GOALS
                   ) -> dict[str, Any]:
    """Products and goals, deterministic in the arguments."""
    if train_goals + test_goals > num_products:
        raise ValueError("every goal asks for its own product: need more products than goals")
    brands = make_brands(NUM_BRANDS, seed)
    products = make_products(num_products, seed, brands)
    targets = random.Random(f"webshop/{seed}/targets").sample(range(num_products),
                                                              train_goals + test_goals)
    goals = {
        "test": [make_goal(products[t], seed, "test", j)
                 for j, t in enumerate(targets[:test_goals])],
        "train": [make_goal(products[t], seed, "train", j)
                  for j, t in enumerate(targets[test_goals:])],
    }
    return {"version": GENERATOR_VERSION, "seed": seed, "brands": brands, "products": products,
            "goals": goals}


def store_path(seed: int, num_products: int, train_goals: int, test_goals: int,
               root: pathlib.Path | None = None) -> pathlib.Path:
    name = f"store-v{GENERATOR_VERSION}-seed{seed}-{num_products}-{train_goals}-{test_goals}.json"
    return (root or cache_root()) / name


def load_store(seed: int = 0, num_products: int = NUM_PRODUCTS, train_goals: int = TRAIN_GOALS,
               test_goals: int = TEST_GOALS, root: pathlib.Path | None = None
               ) -> dict[str, Any]:
    """The cached store, generating and writing it (atomically) on first use."""
    path = store_path(seed, num_products, train_goals, test_goals, root)
    if path.exists():
        with open(path) as f:
            return json.load(f)
    store = generate_store(seed, num_products, train_goals, test_goals)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(dir=path.parent, prefix=".staging-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(store, f, separators=(",", ":"))
        os.replace(staging, path)   # a concurrent writer's file is identical
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return store
