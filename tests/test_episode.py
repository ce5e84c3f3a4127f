"""The episode status table: one classification, used by training and evaluation alike."""

import subprocess
import sys

import pytest

from agentrl_jax import episode
from agentrl_jax.controller import wire
from agentrl_jax.episode import SampleStatus, Treatment
from agentrl_jax.evaluation import agentbench

S = SampleStatus
TABLE = {
    S.COMPLETED: Treatment.SCORED,
    S.AGENT_CONTEXT_LIMIT: Treatment.PENALISED,
    S.AGENT_VALIDATION_FAILED: Treatment.PENALISED,
    S.AGENT_INVALID_ACTION: Treatment.PENALISED,
    S.TASK_LIMIT_REACHED: Treatment.PENALISED,
    S.RUNNING: Treatment.PENALISED,
    S.TASK_ERROR: Treatment.MASKED,
    S.CANCELLED: Treatment.MASKED,
    S.UNKNOWN: Treatment.MASKED,
}


def test_every_status_has_its_treatment():
    assert set(TABLE) == set(SampleStatus)
    for status, treatment in TABLE.items():
        assert episode.training_treatment(status) is treatment, status
        assert episode.training_treatment(status.value) is treatment, status


def test_agent_faults_are_penalised_never_masked():
    # An agent must not escape the penalty by causing an end that is masked.
    for status in (S.AGENT_CONTEXT_LIMIT, S.AGENT_VALIDATION_FAILED, S.AGENT_INVALID_ACTION):
        assert status not in episode.MASKED_STATUSES


def test_an_unrecognised_status_is_unknown_and_masked():
    assert SampleStatus.parse("solved!") is S.UNKNOWN
    assert SampleStatus.parse(None) is S.UNKNOWN
    assert episode.training_treatment("solved!") is Treatment.MASKED


def test_unknown_is_a_task_error_in_evaluation_as_in_training():
    # The one decision: the statuses training masks are exactly evaluation's task errors.
    assert set(agentbench.TERMINATIONS["task_error"]) == episode.MASKED_STATUSES
    assert S.UNKNOWN in agentbench.TERMINATIONS["task_error"]
    counted = [s for statuses in agentbench.TERMINATIONS.values() for s in statuses]
    assert len(counted) == len(set(counted)), "a status is in two Table 7 columns"


@pytest.mark.parametrize("status, reward, success", [
    (S.COMPLETED, 1.0, True),
    ("completed", 1.0, True),
    (S.COMPLETED, 0.99, False),   # WebShop: a partial attribute match scores, but is no success
    (S.COMPLETED, 0.0, False),
    (S.TASK_LIMIT_REACHED, 1.0, False),
    (S.UNKNOWN, 1.0, False),
    ("solved!", 1.0, False),
])
def test_is_success(status, reward, success):
    assert episode.is_success(status, reward) is success


def test_wire_carries_the_same_types():
    assert wire.SampleStatus is SampleStatus and wire.SampleIndex is episode.SampleIndex
    assert wire.WorkerEnvOutput().status == S.RUNNING.value


def test_episode_imports_nothing_beyond_the_standard_library():
    code = ("import sys, agentrl_jax.episode; print(sorted(m for m in "
            "('pydantic', 'starlette', 'numpy', 'jax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
