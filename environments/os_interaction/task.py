"""The OS task (AgentBench-FC os_interaction): operate or answer questions in a Linux shell.

Episode, in AgentBench's order: the problem's machine is built, its init scripts run each as
its own process, then `start` runs in the agent's persistent shell (so its cwd, variables and
background jobs are what the agent begins with), the agent gets a system prompt and "Now, I
will start a new problem in a new OS. My problem is: ...", and has `max_rounds` (8) turns.
Each turn's tool calls run in order:

    bash_action(script)     runs in the persistent shell (30 s); the reply is "The output of the
                            OS:\n\n<stdout+stderr>", cut to 780 characters plus a note when it
                            is longer than 800, or "The output of the OS is empty."
    answer_action(answer)   ends the episode and grades `answer`
    finish_action(thought)  ends the episode and grades it with no answer (operation problems)

Grading is AgentBench's: `match` compares the (stripped) answer with the expected string or
searches a regex; `check` runs each check script in the machine as its own process with the
arguments [answer, output of the previous scripts...], a null script meaning the reference
`example`; all must exit 0. As AgentBench's, the checks (the example included) run after the answer
in the agent's machine, among its processes; unlike AgentBench's, those are frozen meanwhile and
the checks run on the image's own interpreters and tools (see machine.py, "Grading"). Reward 1 or 0,
status `completed`. A turn without tool calls gets a
user message and a call with bad arguments or an unknown name an error tool message; both cost
the round. Out of rounds: `task limit reached`. An init script that fails: `task error`.

Machines. Each problem names its AgentBench image (default, packages, ubuntu), built by
scripts/setup.sh into `rootfs_dir`; the task refuses to start when one it needs is missing,
unless `allow_host_fallback` (then the host's /usr stands in, and problems that rely on the
image's content or on writing outside the writable directories fail). `root` is "auto" (the
copy-on-write overlay when the worker is host root, else "seeded"), "overlay" or "seeded"
(machine.py); the root in use is printed at start and recorded in every episode's metrics.
Each machine's memory (`memory_mb`, tmpfs writes included), CPU share (`cpus`) and written bytes
(`disk_mb`) are bounded, and all machines of a worker together by `worker_memory_mb` (default:
half the host's memory), where the worker is root (cgroups and tmpfs mounts).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.os_interaction.data import DEFAULT_DATA_DIR, Problem, load_split
from environments.os_interaction.machine import (
    COMMAND_TIMEOUT_S,
    Machine,
    MachineSpec,
    default_rootfs_dir,
    image_path,
)
from environments.sandbox import Limits, cgroup
from environments.sandbox.config import container_open_files, default_worker_memory_bytes
from environments.sandbox.layer import remove_stale_layers
from environments.sandbox.mounts import host_root
from environments.sandbox.uids import is_leased
from environments.worker.rounds import BAD_ARGUMENTS, Reply, ToolHandler, ToolRounds
from environments.worker.task import AgentTurn, EpisodeResult, Session, Task, ToolCall

SYSTEM_PROMPT = """You are an assistant that will act like a person, I will play the role of linux(ubuntu) operating system. Your goal is to implement the operations required by me or answer to the question proposed by me. For each of your turn, you should first think what you should do, and then take exactly one of the three actions with the tools provided: "bash_action", "finish_action" or "answer_action".

1. If you think you should execute some bash code, call `bash_action` with the bash code.
2. If you think you have finished the task, call `finish_action`.
3. If you think you have got the answer to the question, call `answer_action` with the answer.

If the output is too long, I will truncate it. The truncated output is not complete. You have to deal with the truncating problem by yourself. Attention, your bash code should not contain any input operation. Once again, you should take only exactly one of the three actions in each turn."""  # noqa: E501 (AgentBench's prompt, adapted to tools)

PROBLEM_PREFIX = "Now, I will start a new problem in a new OS. My problem is:\n\n"
NO_TOOL_CALLS = "No executable tool calls found. Please call one of the tools provided."
OUTPUT_LIMIT, OUTPUT_KEEP = 800, 780
TRUNCATED_NOTE = "\n[truncated because the output is too long]"


def _tool(name: str, description: str, argument: str, about: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object",
                       "properties": {argument: {"type": "string", "description": about}},
                       "required": [argument], "additionalProperties": False}}}


TOOLS = [
    _tool("bash_action", "Execute bash code to perform an operation in the Linux environment.",
          "script", "The bash script to be executed."),
    _tool("finish_action", "Indicate that the task has been finished or need some additional "
          "information to be finished.", "thought",
          "The thought or reason indicating the task is finished."),
    _tool("answer_action", "Provide the answer to the question.", "answer",
          "The answer to the question."),
]


def observation(output: str) -> str:
    if not output:
        return "The output of the OS is empty."
    if len(output) > OUTPUT_LIMIT:
        output = output[:OUTPUT_KEEP] + TRUNCATED_NOTE
    return "The output of the OS:\n\n" + output


async def grade(problem: Problem, machine: Machine, answer: str | None) -> tuple[bool, str]:
    """AgentBench's judgement of `answer` (None after finish_action): (passed, detail)."""
    if problem.match is not None:
        if answer is None:
            return False, "no answer given"
        text = answer.strip() if problem.match.get("strip") else answer
        if "answer" in problem.match:
            return text == problem.match["answer"], "match"
        return re.search(problem.match["regex"], text) is not None, "regex"
    arguments = [str(answer)]
    for number, script in enumerate(problem.check or ()):
        script = script or problem.example
        if script is None:
            return False, f"check {number} refers to a missing example"
        status, output = await machine.check(script, *arguments)
        if status != 0:
            return False, f"check {number} exited {status}: {output.strip()[-200:]!r}"
        arguments.append(output)
    return True, "check"


class OSTask(Task):
    """`split` is "train" or "test"; `rootfs_dir` holds the images (build_rootfs.sh).

    Raises ValueError when an image the split needs is missing (and not `allow_host_fallback`)
    or when `root="overlay"` (or "auto" on a host-root worker) is asked of a worker that cannot
    mount, (with `memory_mb` or `cpus`) cannot make cgroups, or cannot freeze a machine to
    grade it: an overlay is the whole bounded, faithfully graded machine or nothing.
    """

    tools = TOOLS
    # The worker runs no agent code itself; its machines are the sandboxes, and their overlay
    # root, cgroups and byte quota need a host-root worker. A host-root launcher therefore starts
    # it outside a worker sandbox, asking for the overlay so that it cannot quietly downgrade.
    host_root_params = ("root=overlay",)
    # Without host root: machines on the read-only image with writable copies, rlimits only.
    host_root_fallback_params = ("root=seeded",)

    def __init__(self, split: str = "train", max_rounds: int = 8, concurrency: int = 32,
                 data_dir: str | None = None, rootfs_dir: str | None = None,
                 scratch_dir: str | None = None, allow_host_fallback: bool = False,
                 root: str = "auto", memory_mb: int = 2048, disk_mb: int = 1024,
                 cpus: float = 1.0, worker_memory_mb: int | None = None) -> None:
        self.split = split
        self.name = task_key("os_interaction", split)
        self.max_rounds = max_rounds
        self.concurrency = concurrency
        self.problems = load_split(split, data_dir or DEFAULT_DATA_DIR)
        self.rootfs_dir = Path(rootfs_dir) if rootfs_dir else default_rootfs_dir()
        # Private layers on tmpfs (a root worker's are tmpfs mounts of their own anyway).
        scratch_dir = scratch_dir or ("/dev/shm/agentrl_os" if Path("/dev/shm").is_dir()
                                      else None)
        if root == "auto":
            root = "overlay" if host_root() else "seeded"
        if root not in ("overlay", "seeded"):
            raise ValueError(f"root must be auto, overlay or seeded, not {root!r}")
        if root == "overlay" and not host_root():
            raise ValueError("root=overlay needs a worker that is host root (it mounts each "
                             "machine's copy-on-write root); use root=seeded otherwise")
        if root == "overlay" and (memory_mb or cpus) and not cgroup.available():
            raise ValueError("root=overlay bounds each machine's memory and CPU with cgroup-v1 "
                             f"memory and cpu controllers under {cgroup.CGROUP_ROOT}, which this "
                             "worker cannot use; mount them, or pass memory_mb=0 cpus=0")
        if root == "overlay" and not cgroup.freezer_available():
            raise ValueError("root=overlay grades beside the frozen machine, as AgentBench's "
                             "checks run among the container's processes; it needs the cgroup-v1 "
                             f"freezer under {cgroup.CGROUP_ROOT}, which this worker cannot use; "
                             "mount it, or pass root=seeded (checks then see no processes)")
        # 0 turns a bound off.
        # A container's open-file limit (scripts use high fds); the bounds above are the
        # machine's protection and stay.
        limits = Limits(timeout_s=COMMAND_TIMEOUT_S, sandbox_memory_bytes=memory_mb * 1024**2
                        or None, disk_bytes=disk_mb * 1024**2 or None, cpus=cpus or None,
                        open_files=container_open_files())
        worker_memory = (default_worker_memory_bytes() if worker_memory_mb is None
                         else worker_memory_mb * 1024**2)
        self.specs: dict[str, MachineSpec] = {}
        missing = []
        for name in sorted({p.image for p in self.problems}):
            image = image_path(name, self.rootfs_dir)
            if image is None:
                missing.append(name)
            self.specs[name] = MachineSpec(
                image=str(image) if image else None, root=root if image else "host",
                scratch_dir=scratch_dir, limits=limits, worker_memory_bytes=worker_memory)
        if missing and not allow_host_fallback:
            raise ValueError(
                f"the OS task's images {missing} are not built in {self.rootfs_dir}: run "
                "scripts/setup.sh as root (it calls environments/sandbox/images/build_rootfs.sh)"
                ", or pass allow_host_fallback=true to use the host's /usr instead (problems "
                "that need the image's content or a writable / then fail)")
        if host_root() and scratch_dir is not None:   # what a killed worker left on the host
            stale = remove_stale_layers(scratch_dir, is_leased)
            stale += cgroup.remove_stale_groups() if cgroup.available() else []
            if stale:
                print(f"{self.name}: removed {len(stale)} machine layers and cgroups left by "
                      "workers that died", file=sys.stderr, flush=True)
        roots = sorted({f"{n}: {s.root}" for n, s in self.specs.items()})
        print(f"{self.name}: machines {', '.join(roots)}", file=sys.stderr, flush=True)

    def indices(self) -> list[SampleIndex]:
        return list(range(len(self.problems)))

    def problem(self, index: SampleIndex) -> Problem:
        if not isinstance(index, int) or not 0 <= index < len(self.problems):
            raise ValueError(f"{self.name} has no sample {index!r}")
        return self.problems[index]

    async def episode(self, index: SampleIndex, session: Session) -> EpisodeResult:
        problem = self.problem(index)
        spec = self.specs[problem.image]
        machine = await Machine.start(spec)
        metrics: dict[str, Any] = {"source": problem.source, "image": spec.image or "host",
                                   "root": spec.root}
        try:
            for script in problem.init:
                status, output = await machine.exec_independent(script)
                if status != 0:
                    metrics["error"] = f"init script exited {status}: {output[-300:]}"
                    return EpisodeResult(SampleStatus.TASK_ERROR, 0.0, metrics)
            if problem.start is not None:
                await machine.run(problem.start[1])
            session.inject({"role": "system", "content": SYSTEM_PROMPT})
            session.inject({"role": "user", "content": PROBLEM_PREFIX + problem.description})
            return await OSRounds(session, self.max_rounds, problem, machine, metrics).run()
        finally:
            await machine.close()


class OSRounds(ToolRounds):
    """One episode's rounds in the problem's machine: the shell, and the grading of the answer.

    `metrics` (the episode's, shared with `OSTask.episode`) gains the round reached, the count
    of commands that timed out, and the grade. Every call whose arguments cannot be used reads
    `BAD_ARGUMENTS`, over-long ones included; an unknown tool `UNKNOWN_FUNCTION`; both cost
    the round.
    """

    def __init__(self, session: Session, max_rounds: int, problem: Problem, machine: Machine,
                 metrics: dict[str, Any]) -> None:
        super().__init__(session, max_rounds)
        self.problem, self.machine, self.metrics = problem, machine, metrics

    def before_turn(self) -> None:
        self.metrics["rounds"] = self.round

    def tool(self, name: str) -> ToolHandler | None:
        return {"bash_action": self.bash_action, "answer_action": self.answer_action,
                "finish_action": self.finish_action}.get(name)

    async def without_calls(self, turn: AgentTurn) -> Reply:
        return Reply(NO_TOOL_CALLS)

    def malformed_call(self, call: ToolCall) -> Reply:
        return Reply(BAD_ARGUMENTS)

    async def bash_action(self, call: ToolCall, arguments: dict[str, Any]) -> Reply:
        output, timed_out = await self.machine.run(str(arguments.get("script", "")))
        self.metrics["timeouts"] = self.metrics.get("timeouts", 0) + timed_out
        return Reply(observation(output))

    async def answer_action(self, call: ToolCall, arguments: dict[str, Any]) -> Reply:
        return await self.graded(str(arguments.get("answer", "")))

    async def finish_action(self, call: ToolCall, arguments: dict[str, Any]) -> Reply:
        return await self.graded(None)

    async def graded(self, answer: str | None) -> Reply:
        """Ends the episode with `grade`'s verdict on `answer` (None: no answer given)."""
        passed, detail = await grade(self.problem, self.machine, answer)
        self.metrics.update(result=passed, detail=detail)
        return Reply(ending=EpisodeResult(SampleStatus.COMPLETED, float(passed), self.metrics))

    def limit_reached(self) -> EpisodeResult:
        return EpisodeResult(SampleStatus.TASK_LIMIT_REACHED, 0.0, self.metrics)
