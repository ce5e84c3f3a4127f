"""Where a run's models live and who trains them: the one part of the job that differs between
one machine and a pod (`config.deployment`).

The job (`experiment/job.py`) runs the same graph of stages on either; a `Deployment` gives it
what differs:

  local   one process: the warm start on demonstrations, then one sampler and the trainer on
          one device each (`LocalDeployment`, below)
  pod     several processes (`jax.distributed`) or one host with many devices: the policy is
          `model.path`, sampler replicas on every host, the trainer's mesh over the rest
          (`experiment/pod_job.py`'s `PodDeployment`); process 0 runs the graph, the others
          follow it in the RL stage

The job does not know how environments are started either: the launcher hands it
`Environments` (`environments/fleet.py` on one machine, `REMOTE` for an existing fleet at
`env.controller_url`), so this package never imports the environments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import ml_collections

from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment import rl_stage
from agentrl_jax.parallel.mesh import single_device_mesh

DEPLOYMENTS = ("local", "pod")


@dataclasses.dataclass(frozen=True)
class Environments:
    """How the job reaches its tasks.

    Attributes:
      prepare: (tasks, splits, log_dir) builds each task's data for those splits, outside any
        sandbox (a sandboxed worker only reads it).
      serve: (env config, log_dir) -> a context manager whose value is the controller's URL:
        `env.controller_url`, or a fleet it starts and stops.
    """

    prepare: Callable[[Sequence[str], Sequence[str], pathlib.Path], None]
    serve: Callable[[Any, pathlib.Path], contextlib.AbstractContextManager[str]]


def _prepared_elsewhere(tasks: Sequence[str], splits: Sequence[str],
                        log_dir: pathlib.Path) -> None:
    """An existing fleet built its own data."""


# An existing fleet, at `env.controller_url` (a pod's, or any AgentRL-compatible controller).
REMOTE = Environments(prepare=_prepared_elsewhere,
                      serve=lambda env, log_dir: contextlib.nullcontext(env.controller_url))


class Deployment(Protocol):
    """What the job asks of where it runs.

    Attributes:
      leads: whether this process runs the graph (else it only `follow`s the RL stage).
      warm_starts: whether the run plays demonstrations and warm-starts on them (else the
        policy is `model.path`, or the zoo model `model.name`).
      resumes_from_checkpoints: whether the run's state is its RL checkpoints. True: the RL
        stage runs on every start, restoring the trained weights from its last checkpoint (a
        resume after the last step trains nothing), and a changed config (more steps, say)
        starts the graph again over the same checkpoints. False: the RL stage is marked done
        once and leaves RUN_DIR/final_model, which the later stages load, and a changed config
        is refused.
      probes: whether the copy probe runs after the warm start and at each checkpoint.
    """

    leads: bool
    warm_starts: bool
    resumes_from_checkpoints: bool
    probes: bool

    def open(self, policy_dir: pathlib.Path, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        """(the policy the pipeline trains and evaluates, its started sampler), both kept
        until `stack` closes; `policy_dir` is the HF directory the run starts from."""

    def rl_options(self, policy: Any, engine: Any, controller_url: str) -> dict[str, Any]:
        """`rl_stage.run_rl`'s arguments that depend on the deployment (`trainer_mesh` at
        least)."""

    def after_rl(self, result: rl_stage.RLResult, local_dir: pathlib.Path) -> None:
        """Called once the RL stage ran (its hub's record goes to `local_dir`)."""

    def finish(self, local_dir: pathlib.Path) -> None:
        """Called once every stage is done (a pod releases its followers here)."""

    def follow(self) -> None:
        """A process that does not lead: its part of the RL stage, until the leader is done."""


class LocalDeployment:
    """One process, one sampler and the trainer on the first device: the warm start's policy
    is loaded once and sampled by an engine over the same model."""

    leads = True
    warm_starts = True
    resumes_from_checkpoints = False
    probes = True

    def __init__(self, config: ml_collections.ConfigDict):
        self.config = config

    def open(self, policy_dir: pathlib.Path,
             stack: contextlib.AsyncExitStack) -> tuple[policy_lib.Policy, Any]:
        policy = policy_lib.load_policy(policy_dir, self.config.model.parser)
        return policy, stack.enter_context(rl_stage.make_engine(self.config.rl, policy))

    def rl_options(self, policy: Any, engine: Any, controller_url: str) -> dict[str, Any]:
        return {"trainer_mesh": single_device_mesh()}

    def after_rl(self, result: rl_stage.RLResult, local_dir: pathlib.Path) -> None:
        pass

    def finish(self, local_dir: pathlib.Path) -> None:
        pass

    def follow(self) -> None:
        raise AssertionError("a local run has one process, which leads")
