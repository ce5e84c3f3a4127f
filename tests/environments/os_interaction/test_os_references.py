"""Every AgentBench OS problem's reference solution, played through a real worker (slow).

Issue #16 asks for at least 99% of the 1026 problems (dev 26 + train 1000) to pass their own
check; `benchmarks/results/oracle_os_interaction.json` lists the ones that do not, and
docs/security.md ("OS task") why.
"""

from __future__ import annotations

import pytest
from os_task_fixtures import needs_sandbox, needs_shared_data

from environments import oracle


@pytest.mark.slow
@needs_sandbox
@needs_shared_data
def test_reference_solutions_pass_on_at_least_99_percent(tmp_path):
    summaries = [oracle.main(["--task", "os_interaction", "--split", split,
                              "--output", str(tmp_path / "oracle.json")])
                 for split in ("test", "train")]
    episodes = sum(s["episodes"] for s in summaries)
    successes = sum(s["successes"] for s in summaries)
    assert episodes == 1026
    assert successes / episodes >= 0.99, [s["failures"] for s in summaries]
