"""An evaluation's journal: what a stopped evaluation resumes from."""

import json

import numpy as np

from agentrl_jax.episode import SampleStatus
from agentrl_jax.evaluation import transcripts
from agentrl_jax.rollout.record import Rollout


def rollout(task, index, run=0, reward=1.0):
    empty = np.zeros(0, np.int32)
    return Rollout(task, index, run, 0, empty, empty, np.zeros(0, np.float32), empty, empty,
                   reward=reward, status=SampleStatus.COMPLETED, num_turns=2,
                   messages=[{"role": "user", "content": f"{task} {index}"}])


def test_a_journal_resumes_with_the_episodes_it_holds(tmp_path):
    path = tmp_path / "eval_journal.jsonl"
    log = transcripts.TranscriptLog(path, key="k1")
    assert log.resume() == []
    log(rollout("db-test", 3))
    log(rollout("kg-test", "a", run=1, reward=0.0))

    again = transcripts.TranscriptLog(path, key="k1")
    records = again.resume()
    assert [(r["task"], r["index"], r["run"]) for r in records] == [
        ("db-test", 3, 0), ("kg-test", "a", 1)]
    assert again.episodes == records   # the transcripts written at the end include them
    [db, kg] = transcripts.finished_rollouts(records)
    assert (db.task, db.index, db.group_id, db.reward, db.status) == (
        "db-test", 3, 0, 1.0, SampleStatus.COMPLETED)
    assert (kg.index, kg.group_id, kg.reward, kg.num_turns) == ("a", 1, 0.0, 2)
    assert kg.messages == [{"role": "user", "content": "kg-test a"}]


def test_a_journal_of_another_evaluation_starts_afresh(tmp_path):
    path = tmp_path / "eval_journal.jsonl"
    log = transcripts.TranscriptLog(path, key="k1")
    log.resume()
    log(rollout("db-test", 3))
    assert transcripts.TranscriptLog(path, key="k2").resume() == []
    assert transcripts.TranscriptLog(path, key="k1").resume() == []   # k2 replaced it


def test_a_line_torn_by_a_kill_is_played_again_and_later_lines_survive(tmp_path):
    path = tmp_path / "eval_journal.jsonl"
    log = transcripts.TranscriptLog(path, key="k1")
    log.resume()
    log(rollout("db-test", 1))
    with open(path, "a") as f:
        f.write('{"task": "db-test", "index": 2, "rew')   # the kill, mid-write
    resumed = transcripts.TranscriptLog(path, key="k1")
    assert [r["index"] for r in resumed.resume()] == [1]
    resumed(rollout("db-test", 2))
    assert [r["index"] for r in transcripts.TranscriptLog(path, key="k1").resume()] == [1, 2]
    assert json.loads(path.read_text().splitlines()[0]) == {"journal_of": "k1"}


def test_without_a_journal_nothing_is_written(tmp_path):
    log = transcripts.TranscriptLog()
    assert log.resume() == []
    log(rollout("db-test", 1))
    assert log.episodes[0]["run"] == 0 and list(tmp_path.iterdir()) == []
