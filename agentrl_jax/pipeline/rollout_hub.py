"""The trainer's door for sampling workers that run as separate processes (other hosts).

A sampling worker (`pipeline.sampling_worker`) asks the hub what to run and how (`spec`),
downloads each new weight version, claims groups — one (task, index) draw to play G times —
plays them against the environment controller with its own engine, and posts the finished
rollouts back. The hub serves on the pipeline's own event loop, so claims go through the same
staleness gate and rollouts into the same buffer as in-process rollout workers.

Each heartbeat carries the (version, checksum) the worker serves per policy, after verifying
what it downloaded (`pipeline.sampling_worker`); the hub keeps them (`served`) and refuses claims
from a worker that reports serving a version under another checksum than the one published.
With LoRA (`spec["adapters"]`) the published weights are the adapters alone.

The hub is one of the pipeline's rollout sources (`pipeline.rollout_source`): attached to the
pipeline's feed, a worker's claim admits and opens a group there (or is declined, when the gate
is closed) and its rollouts go to the pipeline's buffer; detached (before and after a run),
every claim is declined. Its HTTP server is started and stopped apart (`start`, `stop`), by
whoever tells the workers where it is.

A worker that stops heartbeating for `lease_timeout_s` is lost: every member of its claimed
groups that has not arrived is entered as a failed rollout, so those groups are released and
masked out instead of blocking the trainer, and nothing the worker was still playing is trained
on. A restarted worker simply claims new groups.

A worker (a sampler replica) whose last `failed_groups_to_drop` delivered groups held no
trainable rollout is *dropped*: logged, and refused further claims (403), so that training goes
on with the others instead of masking a broken replica's groups step after step. A group it
completes with any trainable member resets its count. The last admitted worker is never
dropped (all failing at once points at the environments, not the samplers): that is logged as
an error instead; and when every admitted worker has been lost, a dropped one that still
heartbeats is readmitted, so the run is never left with live workers and none allowed to claim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse

from agentrl_jax.pipeline.rollout_source import GroupFeed, require_group_size
from agentrl_jax.pipeline.wire_format import rollout_from_json, weights_to_bytes
from agentrl_jax.rollout.record import Rollout
from agentrl_jax.tree_digest import tree_digest

log = logging.getLogger(__name__)

FAILED_GROUPS_TO_DROP = 3  # consecutive groups without a trainable rollout drop a worker
MISMATCHES_KEPT = 100  # a worker's mismatched reports kept for its report (it is refused anyway)

# Returns (group_id, task, index) of a newly opened group, or None when the gate is closed.
ClaimFn = Callable[[], Awaitable["tuple[int, str, Any] | None"]]
DeliverFn = Callable[[Rollout], None]


@dataclasses.dataclass(frozen=True)
class HubSettings:
    """What a hub serves: the `spec` workers build their sampling from
    (`sampling_worker.make_spec`), and how long a silent worker keeps its groups."""

    spec: dict[str, Any]
    lease_timeout_s: float = 30.0


@dataclasses.dataclass
class _Lease:
    worker_id: str
    task: str
    index: Any
    delivered: set[int] = dataclasses.field(default_factory=set)
    any_trainable: bool = False


async def _declined() -> None:
    return None


def _dropped(rollout: Rollout) -> None:
    log.info("rollout of group %d arrived after the run; dropped", rollout.group_id)


class RolloutHub:
    def __init__(self, spec: dict[str, Any], group_size: int, *,
                 claim: ClaimFn = _declined, deliver: DeliverFn = _dropped,
                 lease_timeout_s: float = 30.0,
                 failed_groups_to_drop: int = FAILED_GROUPS_TO_DROP):
        """`claim`, `deliver`: where claims and rollouts go until a feed is attached (default:
        declined, dropped)."""
        self.spec = spec
        self.failed_groups_to_drop = failed_groups_to_drop
        self._failed_in_a_row: dict[str, int] = {}
        self.dropped_workers: list[str] = []
        self.group_size = group_size
        self.lease_timeout_s = lease_timeout_s
        self._claim = claim
        self._deliver_to = deliver
        # policy -> (version, host arrays, SHA-256 checksum of the arrays); the safetensors
        # blob of each is made on its first download (`_blob`), so a version no worker fetches
        # (the pod's host samplers take theirs from the trainer) is never serialised
        self._weights: dict[str, tuple[int, Any, str]] = {}
        self._blobs: dict[str, tuple[int, bytes]] = {}  # policy -> (version, blob) made
        self._published: dict[tuple[str, int], str] = {}  # (policy, version) -> checksum
        self._serving: dict[str, dict[str, tuple[int, str]]] = {}  # worker -> policy -> pair
        # worker -> policy -> [first, last] runs of the versions it reported serving under the
        # published checksum, and the (policy, version) it reported under another checksum
        self._verified: dict[str, dict[str, list[list[int]]]] = {}
        self._mismatched: dict[str, list[str]] = {}
        self._last_seen: dict[str, float] = {}
        self._leases: dict[int, _Lease] = {}
        self.lost_workers: list[str] = []
        self.claims_by_worker: dict[str, int] = {}
        self.groups_by_worker: dict[str, list[int]] = {}  # the group ids each worker claimed
        self.app = self._make_app()
        self._server: uvicorn.Server | None = None
        self._tasks: list[asyncio.Task] = []

    @classmethod
    def of(cls, settings: HubSettings, group_size: int) -> RolloutHub:
        return cls(settings.spec, group_size, lease_timeout_s=settings.lease_timeout_s)

    # ---- a rollout source -----------------------------------------------------------------

    async def attach(self, feed: GroupFeed) -> None:
        """Claims are admitted and opened by `feed`, and rollouts go to it."""
        require_group_size("the hub", self.group_size, feed)
        self._claim, self._deliver_to = feed.try_next_group, feed.deliver

    async def detach(self) -> None:
        """Claims are declined and late rollouts dropped from now on."""
        self._claim, self._deliver_to = _declined, _dropped

    # ---- trainer side ---------------------------------------------------------------------

    def publish(self, policy: str, version: int,
                weights: dict[str, Any] | Callable[[], dict[str, Any]],
                checksum: str | None = None) -> None:
        """Makes `weights` (host numpy arrays, sampler layout; held, not copied, so the caller
        must not change them) the hub's `policy` at `version`. `weights` may instead be a
        function that makes them, called on the first download (weights that live on a
        sampler's devices: no host copy unless a worker asks); then `checksum` is required.

        `checksum`: `tree_digest(weights)` when the caller has it; workers check what they
        download against it (`x-checksum`) and fetch again on a mismatch.
        """
        if checksum is None:
            if callable(weights):
                raise ValueError("weights published as a function need their checksum")
            checksum = tree_digest(weights)
        self._weights[policy] = (version, weights, checksum)
        self._blobs.pop(policy, None)
        self._published[(policy, version)] = checksum

    @property
    def versions(self) -> dict[str, int]:
        return {policy: version for policy, (version, _, _) in self._weights.items()}

    async def _blob(self, policy: str) -> tuple[int, bytes, str]:
        """(version, safetensors bytes, checksum) of `policy`'s weights, serialised once per
        version (off the event loop: a large model takes seconds)."""
        version, weights, checksum = self._weights[policy]
        made = self._blobs.get(policy)
        if made is None or made[0] != version:
            made = (version, await asyncio.to_thread(
                lambda: weights_to_bytes(weights() if callable(weights) else weights)))
            if self._weights[policy][0] == version:  # not replaced meanwhile
                self._blobs[policy] = made
        return version, made[1], checksum

    @property
    def serves_adapters(self) -> bool:
        """Whether workers build their engine over their own base and take adapter updates
        (`spec["adapters"]`, a LoRA trainer), rather than full weights."""
        return "adapters" in self.spec

    def served(self, worker_id: str) -> dict[str, tuple[int, str]]:
        """policy -> (version, checksum) that `worker_id` last reported serving."""
        return dict(self._serving.get(worker_id, {}))

    def published(self, policy: str, version: int) -> str | None:
        """The checksum published for `policy` at `version` (None: never published)."""
        return self._published.get((policy, version))

    def report(self) -> dict[str, Any]:
        """Per worker seen (JSON-able): the group ids it claimed; per policy the (version,
        checksum) it last reported serving with the checksum published for that version;
        `verified`, per policy the versions it served under the published checksum, as
        [first, last] runs (every weight version a worker served, checked, in a few numbers);
        `mismatched`, the "policy vVERSION" it reported under another checksum."""
        workers = set(self._serving) | set(self.groups_by_worker)
        return {w: {"groups": list(self.groups_by_worker.get(w, [])),
                    "dropped": w in self.dropped_workers,
                    "serving": {p: {"version": v, "checksum": c,
                                    "published": self.published(p, v)}
                                for p, (v, c) in self._serving.get(w, {}).items()},
                    "verified": self._verified.get(w, {}),
                    "mismatched": self._mismatched.get(w, [])}
                for w in sorted(workers)}

    def _record_serving(self, worker_id: str, serving: dict[str, tuple[int, str]]) -> None:
        """Keeps what the worker reports serving, and checks each newly reported version
        against the checksum published for it."""
        before = self._serving.get(worker_id, {})
        self._serving[worker_id] = serving
        for policy, (version, checksum) in serving.items():
            if before.get(policy) == (version, checksum):
                continue
            if self._published.get((policy, version)) != checksum:
                mismatched = self._mismatched.setdefault(worker_id, [])
                if len(mismatched) < MISMATCHES_KEPT:
                    mismatched.append(f"{policy} v{version}")
                continue
            runs = self._verified.setdefault(worker_id, {}).setdefault(policy, [])
            if runs and runs[-1][0] <= version <= runs[-1][1] + 1:
                runs[-1][1] = max(runs[-1][1], version)
            else:
                runs.append([version, version])

    def _admits(self, worker_id: str) -> bool:
        """Whether the worker may claim: not dropped, or dropped while no admitted worker is
        left alive (then it is readmitted with a fresh count, and that is logged)."""
        if worker_id not in self.dropped_workers:
            return True
        if any(w not in self.dropped_workers for w in self._last_seen):
            return False
        self.dropped_workers.remove(worker_id)
        self._failed_in_a_row[worker_id] = 0
        log.error("sampling worker %s readmitted: every admitted worker was lost", worker_id)
        return True

    def _unverified(self, worker_id: str) -> list[str]:
        """The policies the worker serves under a checksum other than the one published."""
        return [f"{policy} v{version}" for policy, (version, checksum)
                in self._serving.get(worker_id, {}).items()
                if self._published.get((policy, version)) != checksum]

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serves on the running loop; returns the API URL."""
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning",
                                                     access_log=False))
        self._tasks = [asyncio.create_task(self._server.serve(sockets=[sock])),
                       asyncio.create_task(self._reap_forever())]
        while not self._server.started:
            await asyncio.sleep(0.01)
        return f"http://{host}:{sock.getsockname()[1]}/api"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        for task in self._tasks[1:]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def reap(self, now: float | None = None) -> None:
        """Fails the unfinished members of groups held by workers silent past the lease."""
        now = time.monotonic() if now is None else now
        lost = {w for w, seen in self._last_seen.items() if now - seen > self.lease_timeout_s}
        for worker_id in lost:
            del self._last_seen[worker_id]
            self.lost_workers.append(worker_id)
            log.warning("sampling worker %s lost; failing its in-flight groups", worker_id)
        for group_id, lease in list(self._leases.items()):
            if lease.worker_id in lost:
                for member in range(self.group_size):
                    if member not in lease.delivered:
                        self._deliver(Rollout.failed(lease.task, lease.index, group_id, member,
                                                     f"sampling worker {lease.worker_id} lost"))

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.lease_timeout_s / 4))
            self.reap()

    def _deliver(self, rollout: Rollout) -> None:
        lease = self._leases.get(rollout.group_id)
        if lease is None or rollout.member in lease.delivered:
            return  # late or duplicate delivery for a group already completed or failed
        lease.delivered.add(rollout.member)
        lease.any_trainable |= rollout.trainable
        if len(lease.delivered) == self.group_size:
            del self._leases[rollout.group_id]
            self._count_group(lease)
        self._deliver_to(rollout)

    def _count_group(self, lease: _Lease) -> None:
        """Counts a completed group against its worker; drops one that keeps failing."""
        worker = lease.worker_id
        if worker not in self._last_seen:   # lost: its groups were failed by the hub
            return
        if lease.any_trainable:
            self._failed_in_a_row[worker] = 0
            return
        failed = self._failed_in_a_row.get(worker, 0) + 1
        self._failed_in_a_row[worker] = failed
        if failed < self.failed_groups_to_drop or worker in self.dropped_workers:
            return
        admitted = [w for w in self._last_seen if w not in self.dropped_workers]
        if admitted == [worker]:
            log.error("sampling worker %s: %d groups in a row without a trainable rollout, but "
                      "it is the last admitted worker; kept (check the environments)", worker,
                      failed)
            return
        self.dropped_workers.append(worker)
        log.warning("sampling worker %s dropped from admission: %d groups in a row without a "
                    "trainable rollout", worker, failed)

    # ---- HTTP -----------------------------------------------------------------------------

    def _make_app(self) -> FastAPI:
        app = FastAPI(title="agentrl_jax rollout hub")

        @app.get("/api/spec")
        async def spec() -> dict[str, Any]:
            return {**self.spec, "group_size": self.group_size}

        @app.post("/api/heartbeat")
        async def heartbeat(request: Request) -> dict[str, Any]:
            body = await _json_object(request)
            worker_id = str(body.get("worker_id", ""))
            self._last_seen[worker_id] = time.monotonic()
            serving = body.get("serving")
            if isinstance(serving, dict):
                try:
                    parsed = {str(p): (int(v), str(c)) for p, (v, c) in serving.items()}
                except (TypeError, ValueError):
                    raise HTTPException(422, "'serving' maps policy -> [version, checksum]"
                                        ) from None
                self._record_serving(worker_id, parsed)
            return {"versions": self.versions}

        @app.get("/api/weights")
        async def weights(policy: str = "current") -> Response:
            if policy not in self._weights:
                return JSONResponse({"detail": f"no weights for policy {policy!r}"}, 404)
            version, blob, checksum = await self._blob(policy)
            return Response(blob, media_type="application/octet-stream",
                            headers={"x-version": str(version), "x-checksum": checksum})

        @app.post("/api/claim")
        async def claim(request: Request) -> Response:
            worker_id = str((await _json_object(request)).get("worker_id", ""))
            if worker_id not in self._last_seen:
                return JSONResponse({"detail": "heartbeat first"}, 409)
            if not self._admits(worker_id):
                return JSONResponse({"detail": "dropped: its rollouts kept failing"}, 403)
            if unverified := self._unverified(worker_id):
                return JSONResponse({"detail": f"serves unpublished weights: {unverified}"}, 409)
            claimed = await self._claim()
            if claimed is None:
                return Response(status_code=204)
            group_id, task, index = claimed
            self._leases[group_id] = _Lease(worker_id, task, index)
            self.claims_by_worker[worker_id] = self.claims_by_worker.get(worker_id, 0) + 1
            self.groups_by_worker.setdefault(worker_id, []).append(group_id)
            return JSONResponse({"group_id": group_id, "task": task, "index": index})

        @app.post("/api/rollouts")
        async def rollouts(request: Request) -> dict[str, int]:
            body = await _json_object(request)
            items = body.get("rollouts")
            if not isinstance(items, list):
                raise HTTPException(422, "'rollouts' must be a list")
            try:
                parsed = [rollout_from_json(item) for item in items]
            except (KeyError, TypeError, ValueError) as error:
                raise HTTPException(422, f"malformed rollout: {error}") from None
            for rollout in parsed:
                self._deliver(rollout)
            return {"accepted": len(parsed)}

        return app


async def _json_object(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
