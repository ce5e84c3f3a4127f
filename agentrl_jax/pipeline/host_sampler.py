"""A follower's own sampler on a pod: an engine on this host's sampler chips, fed the weights
this process gathers with the trainer, and rollout workers that claim groups from the leader.

On several hosts (`launch.tpu_pod`, `mesh.sampler_devices_per_host`), every follower with
sampler chips runs a `HostSampler`: a `pipeline.sampling_worker.SamplingWorker` that talks to
the leader's `RolloutHub` over HTTP exactly as an out-of-process worker does (spec, heartbeat,
claim, rollouts: the same staleness gate, group release and per-token policy versions), except
that it never downloads weights. Each weight version arrives through the follower's trainer
driver instead (`MultiHostDriver.serve(on_weights=receive)`): the all-gather over the trainer
mesh leaves every layer on this process's trainer chips, and the placement puts it straight
onto the sampler's shardings (`trainer_driver.onto`, device to device), or, with the host
fallback, through host memory (`trainer_driver.host`). When the hub announces a version the
worker holds, it installs it; it reports the checksum of what it installed
(`tree_digest.layered_digest`, equal to the `tree_digest` the leader published exactly when
the arrays are the same), so the hub refuses its claims if the placement corrupted anything.

With LoRA the engine is an `AdapterSamplingEngine` over the base this process loaded, and
what arrives is the adapters alone, through host memory (a few MB, next to the full weights
that go device to device); the engine places them and installs them only if the placed arrays
have the checksum of what the trainer gathered (`AdapterSamplingEngine.receive`).

Several replicas on one host are several `HostSampler`s, each with its own engine on its own
devices (`launch.tpu_pod`); the leader's replicas beyond its first one take their weights from
the leader's driver (`TrainerDriver(on_weights=...)`) the same way.

The worker runs its own event loop on a background thread (`start`, `stop`), because the
process's main thread is inside the driver's `serve` loop, blocked in trainer collectives.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import httpx

from agentrl_jax.pipeline.sampling_worker import SamplingWorker
from agentrl_jax.pipeline.trainer_driver import OnWeights
from agentrl_jax.pipeline.weight_sync import replica_of, sampler_layout
from agentrl_jax.rollout.cross_policy import TRAINED_POLICY
from agentrl_jax.sampling.adapter_engine import AdapterSamplingEngine
from agentrl_jax.sampling.async_engine import AsyncSamplingEngine
from agentrl_jax.tree_digest import layered_digest, tree_digest

log = logging.getLogger(__name__)


def replica_name(process: int, replica: int) -> str:
    """A sampler replica's worker id at the hub: its process and its index there."""
    return f"process{process}-{replica}"


def feed(samplers: list[HostSampler], device: bool, first: int = 0) -> OnWeights:
    """The `on_weights` of a process whose `samplers` (filled in as they start) take each
    gathered weight version: with `device`, an `onto_each` gather, one copy per replica, the
    samplers' from replica `first` on (the leader's replica 0 is the pipeline's engine);
    otherwise one host (or trainer-device) tree they share, digested once."""

    def on_weights(placed: Any, version: int | None) -> None:
        if device:
            for index, sampler in enumerate(samplers):
                sampler.receive(replica_of(placed, first + index), version)
        elif samplers:
            checksum = tree_digest(placed)
            for sampler in samplers:
                sampler.receive(placed, version, checksum)

    return on_weights


class HostSampler(SamplingWorker):
    """`engine` (not started) on this host's sampler devices; `device`: the weights arrive
    placed on its shardings (per layer, `trainer_driver.onto`) rather than as host arrays."""

    def __init__(self, hub_url: str, engine: AsyncSamplingEngine, *, device: bool,
                 concurrency: int = 4, worker_id: str | None = None,
                 heartbeat_s: float = 0.5, seed: int = 0):
        super().__init__(hub_url, concurrency, worker_id, heartbeat_s, seed)
        self._engine = engine
        self._device = device
        self._lock = threading.Lock()
        self._received: tuple[int, str, Any] | None = None  # the newest (version, checksum, w)
        self._hub_versions: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._main: asyncio.Task | None = None

    # ---- the trainer driver's side (the serve thread) -------------------------------------

    def receive(self, placed: Any, version: int | None, checksum: str | None = None) -> None:
        """`MultiHostDriver.serve`'s `on_weights`: keeps weight `version` for installing.
        `checksum`: the placed arrays' digest when the caller computed it already (host
        arrays that several replicas share)."""
        if version is None:
            raise ValueError("the leader named no weight version")
        if self._device:
            checksum, weights = layered_digest(placed), sampler_layout(placed)
        else:
            checksum, weights = checksum or tree_digest(placed), placed
        with self._lock:
            self._received = (int(version), checksum, weights)

    # ---- the worker's side ----------------------------------------------------------------

    async def build_engine(self, hub: httpx.AsyncClient, spec: dict[str, Any]
                           ) -> AsyncSamplingEngine:
        if ("adapters" in spec) != isinstance(self._engine, AdapterSamplingEngine):
            raise ValueError("the hub's spec and this host's engine disagree on LoRA (adapters "
                             "need an AdapterSamplingEngine, full weights a plain one)")
        if self._device and isinstance(self._engine, AdapterSamplingEngine):
            raise ValueError("adapters reach a host sampler through host memory (device=False)")
        return self._engine

    async def heartbeat(self, hub: httpx.AsyncClient, engine: AsyncSamplingEngine) -> None:
        reply = (await hub.post("/heartbeat", json={
            "worker_id": self.worker_id,
            "serving": {p: list(vc) for p, vc in self._served.items()}})).json()
        self._hub_versions = dict(reply["versions"])
        for policy, version in self._hub_versions.items():
            if self._served.get(policy, (None,))[0] != version:
                await self._update(hub, engine, policy, version)

    async def _update(self, hub: httpx.AsyncClient, engine: AsyncSamplingEngine,
                      policy: str, version: int) -> bool:
        """Installs the received weights as `policy` if they are `version`; otherwise they
        have not arrived yet (the next heartbeat tries again)."""
        with self._lock:
            received = self._received
        if received is None or received[0] != version:
            return False
        _, checksum, weights = received
        if isinstance(engine, AdapterSamplingEngine):  # verified: installed only if intact
            served_version, checksum = await engine.receive(policy, version, weights, checksum)
            if served_version != version:
                log.warning("host sampler %s: adapters %s v%d refused by the engine (placed "
                            "checksum %s)", self.worker_id, policy, version, checksum[:12])
                return False
        elif self._device:
            await engine.install(policy, version, weights)
        else:
            await engine.update_params(weights, version, policy=policy)
        self._served[policy] = (version, checksum)
        return True

    async def ready(self, hub: httpx.AsyncClient, engine: AsyncSamplingEngine) -> bool:
        """Claims only while serving the version the hub publishes: a fresh heartbeat first,
        so a group admitted for new weights is not played on the old ones."""
        await self.heartbeat(hub, engine)
        current = self._hub_versions.get(TRAINED_POLICY)
        return current is not None and self._served.get(TRAINED_POLICY, (None,))[0] == current

    # ---- the background thread ------------------------------------------------------------

    def start(self) -> None:
        """Runs the worker on its own thread and event loop until `stop`."""
        started = threading.Event()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            self._main = self._loop.create_task(self.run())
            started.set()
            try:
                self._loop.run_until_complete(self._main)
            except asyncio.CancelledError:
                pass
            except httpx.TransportError as error:  # the leader's hub closed (the run's end)
                log.info("host sampler %s: hub gone (%r)", self.worker_id, error)
            except Exception:  # the trainer goes on; the hub fails this worker's groups
                log.exception("host sampler %s stopped", self.worker_id)
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=main, name=f"host-sampler-{self.worker_id}",
                                        daemon=True)
        self._thread.start()
        started.wait()

    def stop(self) -> None:
        """Cancels the worker (its groups in flight are the hub's to fail) and waits for it."""
        if self._thread is None:
            return
        main = self._main
        if self._loop is not None and not self._loop.is_closed() and main is not None:
            self._loop.call_soon_threadsafe(main.cancel)
        self._thread.join(timeout=60)
        self._thread = None
