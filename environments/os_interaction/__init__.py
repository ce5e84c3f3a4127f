"""AgentBench-FC's OS-interaction task: a persistent bash in a per-episode sandbox.

`python -m environments.worker --task os_interaction --param split=test` serves it;
`python -m environments.oracle --task os_interaction` plays its oracle. Needs bubblewrap,
prlimit and the images scripts/setup.sh builds (environments/sandbox/images/build_rootfs.sh);
see docs/security.md ("OS task") for its machines, grading and bounds.
"""

from environments.os_interaction.task import OSTask

TASK = OSTask
