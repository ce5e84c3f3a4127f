"""The controller's timing and capacity settings. Defaults are AgentRL's Go controller's."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ControllerConfig:
    interaction_timeout_s: float = 240.0   # one start_sample/interact call to a worker
    idle_session_timeout_s: float = 300.0  # a running session nobody interacts with is cancelled
    finished_session_ttl_s: float = 600.0  # finished sessions still answer interact/cancel
    clean_interval_s: float = 20.0         # idle expiry and finished-session GC
    heartbeat_timeout_s: float = 11.0      # silent this long: no new sessions, and probed
    liveness_interval_s: float = 1.0       # how often heartbeat ages are checked
    probe_timeout_s: float = 2.0           # a silent worker's worker_status must answer in this
    dead_worker_forget_s: float = 300.0    # a dead worker without sessions is then forgotten
    sync_interval_s: float = 60.0          # reconciliation with every worker's get_sessions
    max_connections: int = 4096            # the one connection pool to all workers
    max_body_bytes: int = 4 * 2**20        # a larger request body is refused with 413
    variant: str = "nova"                  # /api/version: AgentRL's Go controller says "nova"
    version: int = 1
