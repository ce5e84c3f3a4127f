"""The shared-prefix cache's bookkeeping: chains, reference counts, LRU eviction, flushing."""

import itertools

from agentrl_jax.sampling.kv_pages import PagedKVManager
from agentrl_jax.sampling.prefix_cache import PrefixCache

TAG, OTHER = ("current", 0, 0), ("current", 1, 1)


def _cache() -> PrefixCache:
    clock = itertools.count()
    return PrefixCache(4, lambda: next(clock))


def test_lookup_follows_the_whole_prefix_and_the_tag():
    cache = _cache()
    a = cache.insert(TAG, None, [1, 2, 3, 4], page=7, ready=True)
    b = cache.insert(TAG, a, [5, 6, 7, 8], page=9, ready=True)
    assert cache.lookup(TAG, [1, 2, 3, 4, 5, 6, 7, 8, 9], max_pages=5) == [a, b]
    assert cache.lookup(TAG, [1, 2, 3, 4, 5, 6, 7, 8], max_pages=1) == [a]
    # the same second page after another first page is another prefix: no match
    assert cache.lookup(TAG, [0, 2, 3, 4, 5, 6, 7, 8], max_pages=2) == []
    assert cache.lookup(TAG, [1, 2, 3, 4, 5, 6, 0, 8], max_pages=2) == [a]
    assert cache.lookup(OTHER, [1, 2, 3, 4, 5, 6, 7, 8], max_pages=2) == []
    assert cache.insert(TAG, a, [5, 6, 7, 8], page=11, ready=True) is None  # cached already


def test_unheld_nodes_stay_until_evicted_least_recently_used_leaf_first():
    cache = _cache()
    a = cache.insert(TAG, None, [1, 2, 3, 4], page=1, ready=True)
    b = cache.insert(TAG, a, [5, 6, 7, 8], page=2, ready=True)
    c = cache.insert(TAG, None, [9, 9, 9, 9], page=3, ready=True)
    assert cache.release([a, b]) == [] and cache.release([c]) == []
    assert cache.num_pages == 3 and cache.num_unused == 3
    cache.hold([c])  # c in use again: not evictable
    assert cache.evict() == 2  # the leaf b before its parent a
    assert cache.evict() == 1
    assert cache.evict() is None
    assert cache.lookup(TAG, [1, 2, 3, 4, 5], 1) == []
    assert cache.lookup(TAG, [9, 9, 9, 9, 0], 1) == [c]


def test_flush_frees_unheld_pages_now_and_held_ones_on_release():
    cache = _cache()
    a = cache.insert(TAG, None, [1, 2, 3, 4], page=1, ready=True)
    b = cache.insert(TAG, a, [5, 6, 7, 8], page=2, ready=True)
    cache.release([b])  # b unheld, a still held by its creator
    assert cache.flush(lambda tag: tag != TAG) == [2]
    assert cache.lookup(TAG, [1, 2, 3, 4, 5], 1) == []
    assert cache.release([a]) == [1]  # a detached node goes back to the pool when released
    assert cache.num_pages == 0


def test_manager_shares_pages_and_evicts_idle_sessions_and_unused_prefixes():
    pages = PagedKVManager(num_pages=9, page_size=4, prefix_cache=True)  # 8 usable pages
    prompt = list(range(10))
    first = pages.acquire("a")
    assert pages.prepare(first, TAG, prompt) == (0, False)
    assert pages.reserve(first, len(prompt) + 2)
    pending = pages.publish(first, prompt, computed=0)
    assert [n.depth for n in pending] == [0, 1] and not any(n.ready for n in pending)
    second = pages.acquire("b")
    # admitted beside the first: it finds the first one's pages, not yet computed
    assert pages.prepare(second, TAG, prompt + [42]) == (8, True)
    assert second.pages[:2] == first.pages[:2] and not second.nodes[0].ready
    for node in pending:
        node.ready = True
    assert pages.reserve(second, 13)
    pages.release(first)
    pages.release(second)
    assert pages.cache_pages == 2 and pages.free_pages == 8 - 3 - 2
    third = pages.acquire("c")
    pages.prepare(third, TAG, [7] * 30)
    assert pages.reserve(third, 30)  # 8 pages: every idle session and cached prefix goes
    assert pages.cache_pages == 0 and pages.cached_sessions() == ["c"]


def test_a_waiting_request_gives_up_pages_not_computed_yet():
    pages = PagedKVManager(num_pages=9, page_size=4, prefix_cache=True)
    prompt = list(range(10))
    first = pages.acquire("a")
    pages.prepare(first, TAG, prompt)
    pages.reserve(first, 10)
    pages.publish(first, prompt, computed=0)
    second = pages.acquire("b")
    pages.prepare(second, TAG, prompt)
    pages.trim_unready(second)
    assert second.nodes == [] and second.tokens == []
    pages.trim_unready(first, detach=True)  # its prefill failed
    third = pages.acquire("c")
    assert pages.prepare(third, TAG, prompt) == (0, False)
