"""The shared-prefix cache: full KV pages keyed by the tokens they hold and all before them.

A radix tree over whole pages, one tree per weights tag (policy, version, install serial): the
node of page i of a prompt is the child of the node of page i-1 keyed by the page's
`page_size` token ids, so a node stands for its whole token prefix and two requests reach the
same node only if their prompts agree on every token up to the end of that page. A request
reuses the longest chain of nodes its prompt reaches; their pages are read-only from then on
(only a node's creator ever wrote them, before the node was ready).

Why keyed by weights: k/v are a function of the weights, so a node is valid only for the tag
that computed it; a lookup under another tag starts at another root and never sees it. On a
weight update the engine also flushes the policy's old trees (`flush`) so their pages return to
the pool as soon as no running request reads them.

Reference counts: every session holding a node holds its whole chain (a count on each node), so
a parent's count is at least each child's. A node nobody holds stays cached, least recently
used first in `_unused`, until the pool needs its page (`evict`); since chains are released
deepest first, the front of `_unused` is a leaf.

Readiness: a node is created when its page is allocated, before the prefill that fills it (so
the G members of a group admitted together find the first member's pages instead of all
missing at once); `ready` turns true once the device call that writes it has been issued. A
reader of a node must wait for readiness (`SamplingEngine` orders its prefill calls by it).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Hashable, Iterator, Sequence

Tag = Hashable  # what computed the k/v: (policy, version, serial)


@dataclasses.dataclass(eq=False)
class PrefixNode:
    """One cached page: the k/v of `tokens` at positions depth·page_size ... + page_size - 1."""

    page: int
    tokens: tuple[int, ...]
    tag: Tag
    parent: PrefixNode | None
    depth: int  # page index within the prompt
    children: dict[tuple[int, ...], PrefixNode] = dataclasses.field(default_factory=dict)
    refs: int = 0
    stamp: int = 0  # when it was last released (LRU order among unused nodes)
    ready: bool = True
    attached: bool = True  # reachable by lookups; a detached node is freed at refs == 0


class PrefixCache:
    """Full pages of computed prompts, shared read-only by later requests (see module doc)."""

    def __init__(self, page_size: int, clock: Callable[[], int]):
        """`clock()`: increasing stamps, shared with the session LRU that evicts beside it."""
        self.page_size, self._clock = page_size, clock
        self._roots: dict[Tag, dict[tuple[int, ...], PrefixNode]] = {}
        self._unused: collections.OrderedDict[int, PrefixNode] = collections.OrderedDict()
        self._held_pages = 0  # pages owned by nodes (attached, or detached but still read)
        self.evictions = 0

    @property
    def num_pages(self) -> int:
        """Pages the cache owns (read-only k/v), held by requests or not."""
        return self._held_pages

    @property
    def num_unused(self) -> int:
        """Pages of nodes no request holds: evictable at once."""
        return len(self._unused)

    def _chunks(self, tokens: Sequence[int], num_pages: int) -> Iterator[tuple[int, ...]]:
        p = self.page_size
        for i in range(num_pages):
            yield tuple(tokens[i * p : (i + 1) * p])

    def lookup(self, tag: Tag, tokens: Sequence[int], max_pages: int) -> list[PrefixNode]:
        """The longest chain of cached nodes (at most `max_pages`) matching `tokens` under `tag`.

        Takes no reference: `hold` the chain before anything else can evict it.
        """
        chain: list[PrefixNode] = []
        children = self._roots.get(tag, {})
        for key in self._chunks(tokens, min(max_pages, len(tokens) // self.page_size)):
            node = children.get(key)
            if node is None:
                break
            chain.append(node)
            children = node.children
        return chain

    def hold(self, nodes: Sequence[PrefixNode]) -> None:
        for node in nodes:
            node.refs += 1
            self._unused.pop(id(node), None)

    def release(self, nodes: Sequence[PrefixNode]) -> list[int]:
        """Drops one reference to each of `nodes` (a chain); returns the pages freed by it.

        Attached nodes nobody holds stay cached (most recently used); detached ones are freed.
        """
        freed = []
        for node in reversed(nodes):  # deepest first, so leaves go first in the LRU order
            node.refs -= 1
            if node.refs > 0:
                continue
            if node.attached:
                node.stamp = self._clock()
                self._unused[id(node)] = node
            else:
                freed.append(self._free_node(node))
        return freed

    def insert(self, tag: Tag, parent: PrefixNode | None, tokens: Sequence[int], page: int,
               ready: bool) -> PrefixNode | None:
        """Adds `page` (which holds, or is about to hold, `tokens` after `parent`'s prefix) as a
        node held once by the caller; None if that prefix is cached already (the caller keeps
        its page private then)."""
        key = tuple(tokens)
        if len(key) != self.page_size:
            raise ValueError(f"a node holds a full page of {self.page_size} tokens")
        if parent is not None and (not parent.attached or parent.tag != tag):
            return None
        children = self._roots.setdefault(tag, {}) if parent is None else parent.children
        if key in children:
            return None
        depth = 0 if parent is None else parent.depth + 1
        node = PrefixNode(page, key, tag, parent, depth, refs=1, ready=ready)
        children[key] = node
        self._held_pages += 1
        return node

    def _next_victim(self) -> PrefixNode | None:
        return next((n for n in self._unused.values() if not n.children), None)

    def next_eviction_stamp(self) -> int | None:
        """When the node `evict` would free was last used (None: nothing to evict)."""
        node = self._next_victim()
        return None if node is None else node.stamp

    def evict(self) -> int | None:
        """Frees the least recently used node nobody holds; its page, or None if there is none."""
        node = self._next_victim()
        if node is None:
            return None
        self.evictions += 1
        return self._free_node(node)

    def detach(self, node: PrefixNode) -> list[int]:
        """Makes `node` and its subtree unreachable; returns the pages freed at once (the
        rest is freed when its last holder releases it)."""
        freed, stack = [], [node]
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            n.children = {}
            if n.attached:
                n.attached = False
                self._unlink(n)
            if n.refs == 0:
                freed.append(self._free_node(n))
        return freed

    def flush(self, keep: Callable[[Tag], bool]) -> list[int]:
        """Detaches every tree whose tag fails `keep(tag)`; returns the pages freed at once."""
        freed = []
        for tag in [t for t in self._roots if not keep(t)]:
            for node in list(self._roots[tag].values()):
                freed += self.detach(node)
            del self._roots[tag]
        return freed

    def _unlink(self, node: PrefixNode) -> None:
        siblings = self._roots.get(node.tag, {}) if node.parent is None else node.parent.children
        if siblings.get(node.tokens) is node:
            del siblings[node.tokens]

    def _free_node(self, node: PrefixNode) -> int:
        self._unused.pop(id(node), None)
        if node.attached:
            node.attached = False
            self._unlink(node)
        self._held_pages -= 1
        return node.page
