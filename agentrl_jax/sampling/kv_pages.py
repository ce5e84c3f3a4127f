"""Host-side bookkeeping of the paged KV pool: free pages, sessions, shared prefixes, LRU eviction.

The pool on device is `num_pages · page_size` slots per layer; page 0 is reserved (its first
slot is the scratch slot padding writes to). A session (one episode, or one anonymous request)
has a list of pages and remembers which tokens' k/v they hold, and under which weights tag
(policy, version, serial) those k/v were computed. Sessions whose turn is finished stay cached,
idle, until the episode ends or memory runs short: then the least recently used idle sessions
are evicted and re-prefilled transparently when they come back.

With a `PrefixCache`, a session's first pages may be shared: `session.nodes` are cache nodes
(read-only, reference counted) and `session.pages[:len(nodes)]` their pages; the rest of its
pages are its own. A turn starts from the longer of its session's own cached prefix and the
longest cached prefix of its prompt (`prepare`), and its prompt's full pages become nodes for
later requests (`publish`). Memory is reclaimed least recently used first, idle sessions and
unused cache nodes alike.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from agentrl_jax.sampling.prefix_cache import PrefixCache, PrefixNode


@dataclasses.dataclass(eq=False)
class Session:
    """A sequence's pages and the tokens whose k/v they hold (token i at position i)."""

    key: str
    persistent: bool  # an episode's session, kept after its turn; else freed at once
    pages: list[int] = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)
    tag: Hashable | None = None  # the weights tag that computed the cached k/v
    busy: bool = False  # a turn is in flight; never evicted while busy
    nodes: list[PrefixNode] = dataclasses.field(default_factory=list)  # shared first pages
    last_used: int = 0  # when its last turn ended (LRU order beside unused cache nodes)

    @property
    def own_pages(self) -> list[int]:
        return self.pages[len(self.nodes):]


class PagedKVManager:
    """Allocates pages to sessions and evicts idle sessions and unused cached prefixes, least
    recently used first."""

    def __init__(self, num_pages: int, page_size: int, prefix_cache: bool = False):
        if num_pages < 2:
            raise ValueError("need at least 2 pages (page 0 is scratch)")
        self.num_pages, self.page_size = num_pages, page_size
        self._free = list(range(num_pages - 1, 0, -1))
        self._sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self._anon = itertools.count()
        self._clock = itertools.count()
        self.cache = PrefixCache(page_size, lambda: next(self._clock)) if prefix_cache else None
        self.evictions = 0

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def cached_sessions(self) -> list[str]:
        return [k for k, s in self._sessions.items() if s.persistent]

    def acquire(self, session_id: str | None) -> Session:
        """The session for `session_id` (new if unknown or evicted), marked busy and most recent."""
        if session_id is None:
            session = Session(f"\0anon{next(self._anon)}", persistent=False)
            self._sessions[session.key] = session
        else:
            known = self._sessions.get(session_id)
            if known is None:
                session = self._sessions[session_id] = Session(session_id, persistent=True)
            elif known.busy:
                raise ValueError(f"session {session_id!r} already has a turn in flight")
            else:
                session = known
            self._sessions.move_to_end(session_id)
        session.busy = True
        return session

    def release(self, session: Session) -> None:
        """Ends a turn: the session becomes idle (evictable), or is freed if not persistent."""
        session.busy = False
        self._sessions.move_to_end(session.key)
        session.last_used = next(self._clock)
        if not session.persistent:
            self.drop(session.key)

    def drop(self, key: str) -> None:
        """Frees an idle session's pages (its references to shared ones) and forgets it."""
        session = self._sessions.get(key)
        if session is None or session.busy:
            return
        del self._sessions[key]
        self._free.extend(reversed(session.own_pages))
        self._release_nodes(session, 0)
        session.pages, session.tokens, session.tag = [], [], None

    def _release_nodes(self, session: Session, keep: int, detach: bool = False) -> None:
        """Drops the session's shared pages from index `keep` on (their page slots go with
        them; its own pages stay, as space). `detach`: also make them unreachable."""
        dropped = session.nodes[keep:]
        if not dropped:
            return
        assert self.cache is not None, "shared pages come from the prefix cache"
        if detach:
            for node in dropped:
                self._free.extend(self.cache.detach(node))
        self._free.extend(self.cache.release(dropped))
        del session.nodes[keep:]
        del session.pages[keep : keep + len(dropped)]
        del session.tokens[keep * self.page_size :]

    # ---- shared prefixes -------------------------------------------------------------------

    def prepare(self, session: Session, tag: Hashable, prompt: Sequence[int]) -> tuple[int, bool]:
        """Sets up `session` for a turn of `prompt` under `tag`: the tokens whose k/v it holds
        become the longest reusable prefix. Returns (reused tokens, whether they came from the
        shared cache rather than the session's own k/v).

        At least the prompt's last token is left to prefill (its logits sample the first new
        token). Shared pages past a divergence are given up (they are read-only).
        """
        reuse = 0
        if session.tag == tag:
            for a, b in zip(session.tokens, prompt[:-1], strict=False):
                if a != b:
                    break
                reuse += 1
        page = self.page_size
        if self.cache is not None:
            if len(session.nodes) > reuse // page:  # diverges inside (or before) a shared page
                self._release_nodes(session, reuse // page)
                reuse = len(session.nodes) * page
            hit = self.cache.lookup(tag, prompt, (len(prompt) - 1) // page)
            if len(hit) * page > reuse:
                self.cache.hold(hit)
                self._release_nodes(session, 0)
                session.nodes = list(hit)
                session.pages[:0] = [n.page for n in hit]
                session.tokens, session.tag = list(prompt[: len(hit) * page]), tag
                return len(hit) * page, True
        session.tokens, session.tag = list(prompt[:reuse]), tag
        return reuse, False

    def publish(self, session: Session, prompt: Sequence[int], computed: int) -> list[PrefixNode]:
        """Makes the prompt's full pages past the session's shared ones cache nodes (pages must
        be reserved); returns those whose k/v are not computed yet (past `computed` tokens),
        which become ready as the prefill proceeds."""
        if self.cache is None:
            return []
        page, pending = self.page_size, []
        for i in range(len(session.nodes), len(prompt) // page):
            parent = session.nodes[-1] if session.nodes else None
            node = self.cache.insert(session.tag, parent, prompt[i * page : (i + 1) * page],
                                     session.pages[i], ready=(i + 1) * page <= computed)
            if node is None:  # cached already (by a request admitted beside this one)
                break
            session.nodes.append(node)
            if not node.ready:
                pending.append(node)
        return pending

    def trim_unready(self, session: Session, detach: bool = False) -> None:
        """Cuts the session's shared pages at the first one not computed yet. `detach` (its
        prefill failed, so it never will be): no later request finds them either."""
        first = next((i for i, n in enumerate(session.nodes) if not n.ready), None)
        if first is not None:
            self._release_nodes(session, first, detach=detach)

    def flush(self, keep: Callable[[Hashable], bool]) -> None:
        """Forgets cached prefixes whose tag fails `keep` (pages held by requests are freed
        when released)."""
        if self.cache is not None:
            self._free.extend(self.cache.flush(keep))

    @property
    def cache_pages(self) -> int:
        return 0 if self.cache is None else self.cache.num_pages

    # ---- memory --------------------------------------------------------------------------

    def _reclaimable(self, session: Session) -> int:
        """Pages that evicting every idle session and unused cache node would free."""
        idle = [s for s in self._sessions.values() if not s.busy and s is not session]
        pages = len(self._free) + sum(len(s.own_pages) for s in idle)
        if self.cache is not None:
            held = {id(n) for s in self._sessions.values() if s.busy for n in s.nodes}
            pages += self.cache.num_pages - len(held)
        return pages

    def _evict_one(self, session: Session) -> None:
        """Frees the least recently used idle session or unused cache node."""
        victim = next((s for s in self._sessions.values() if not s.busy and s is not session),
                      None)
        cache = self.cache
        node_stamp = None if cache is None else cache.next_eviction_stamp()
        if cache is not None and node_stamp is not None and (
                victim is None or node_stamp < victim.last_used):
            page = cache.evict()
            assert page is not None, "next_eviction_stamp promised a node to evict"
            self._free.append(page)
            return
        if victim is None:
            raise RuntimeError("no idle session or unused cache page to evict")
        self.drop(victim.key)
        self.evictions += 1

    def reserve(self, session: Session, num_tokens: int) -> bool:
        """Gives `session` pages for `num_tokens` tokens, evicting (LRU) if needed.

        Returns False (allocating nothing) when even evicting everything idle is not enough.
        """
        missing = -(-num_tokens // self.page_size) - len(session.pages)
        if missing <= 0:
            return True
        if self._reclaimable(session) < missing:
            return False
        while len(self._free) < missing:
            self._evict_one(session)
        session.pages.extend(self._free.pop() for _ in range(missing))
        return True

    def slots(self, session: Session, start: int, stop: int) -> np.ndarray:
        """Slots of positions start..stop-1 of `session`."""
        pos = np.arange(start, stop)
        pages = np.asarray(session.pages, np.int32)
        return (pages[pos // self.page_size] * self.page_size + pos % self.page_size).astype(
            np.int32
        )

    def page_row(self, session: Session, width: int) -> np.ndarray:
        """The session's page table padded with the scratch page 0 (or cut) to `width` pages."""
        row = np.zeros(width, np.int32)
        n = min(width, len(session.pages))
        row[:n] = session.pages[:n]
        return row
