"""Tic-tac-toe through a real task worker over HTTP: the messages, every way a game ends, the
opponent each seed fixes, the minimax oracle on the whole test split, and the demonstrator."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import math
import random
import re

import pytest

from agentrl_jax.experiment import demonstrations
from environments.oracle import (
    EpisodeRecord,
    load_demonstrator,
    load_oracle,
    play_all,
    tool_call_message,
)
from environments.tictactoe import (
    BAD_ARGUMENTS,
    INTRO,
    MARK_TOOL,
    NO_CALL,
    NOT_A_CELL,
    ONE_CALL,
    UNKNOWN_TOOL,
    game,
    taken,
)
from environments.tictactoe.oracle import Demonstrator, Oracle, current_board
from environments.worker.agent_input import MAX_ARGUMENT_CHARS
from tests.environments.worker_episode import WorkerEpisode

_session_ids = itertools.count(10_000)   # clear of play_all's ids (1, 2, ...)
OPPONENT = re.compile(r"The opponent \([XO]\) marked (\d)\.")


def episode(api: str, index: int) -> WorkerEpisode:
    return WorkerEpisode(api, index, next(_session_ids))


def first_index(task, side: str, opening_length: int) -> int:
    return next(i for i, s in enumerate(task.samples)
                if s.side == side and len(s.opening) == opening_length)


def mark(cell) -> dict:
    return tool_call_message("mark", {"cell": cell})


# --------------------------------------------------------------------------- messages


def test_the_first_message_and_each_reply_are_short_and_fixed(worker, test_task):
    index = first_index(test_task, "X", 0)
    sample = test_task.samples[index]
    game_ = episode(worker, index)
    assert game_.first["tools"] == [MARK_TOOL] and game_.first["status"] == "running"
    assert game_.first["messages"] == [{"role": "user", "content": (
        "Tic-tac-toe. You are X; three in a row wins. Call mark(cell) with an empty cell's "
        "number.\n"
        " 1 | 2 | 3\n---+---+---\n 4 | 5 | 6\n---+---+---\n 7 | 8 | 9")}]

    out = game_.send(mark(5))
    board = game.play(game.EMPTY_BOARD, 5)
    reply = game.random_move(random.Random(sample.seed), board)
    board = game.play(board, reply)
    assert not out["finish"] and out["status"] == "running"
    assert out["messages"] == [{"role": "tool", "tool_call_id": "0", "content": (
        f"You marked 5. The opponent (O) marked {reply}.\n{game.draw_board(board)}")}]


def test_an_opponent_to_move_first_moves_before_the_first_message(worker, test_task):
    index = first_index(test_task, "O", 0)
    first = game.random_move(random.Random(test_task.samples[index].seed), game.EMPTY_BOARD)
    content = episode(worker, index).first["messages"][0]["content"]
    assert content == (f"{INTRO.format(side='O')}\nThe opponent (X) marked {first}.\n"
                       f"{game.draw_board(game.play(game.EMPTY_BOARD, first))}")


def test_an_opening_is_on_the_first_board(worker, test_task):
    index = first_index(test_task, "X", 2)
    sample = test_task.samples[index]
    content = episode(worker, index).first["messages"][0]["content"]
    assert content == f"{INTRO.format(side='X')}\n{game.draw_board(sample.start())}"


# --------------------------------------------------------------------------- mistakes


def raw_call(name: str, arguments: str) -> dict:
    return tool_call_message(name, arguments)


TWO_CALLS = {"role": "assistant", "content": "",
             "tool_calls": [mark(1)["tool_calls"][0], {**mark(2)["tool_calls"][0], "id": "1"}]}

MISTAKES = [
    ("no tool call", {"role": "assistant", "content": "I mark 5."}, NO_CALL),
    ("two calls", TWO_CALLS, ONE_CALL),
    ("another tool", tool_call_message("move", {"cell": 5}), UNKNOWN_TOOL),
    ("no cell", tool_call_message("mark", {}), NOT_A_CELL),
    ("another argument", tool_call_message("mark", {"square": 5}), NOT_A_CELL),
    ("a string", mark("5"), NOT_A_CELL),
    ("a float", mark(5.0), NOT_A_CELL),
    ("a fraction", mark(4.5), NOT_A_CELL),
    ("a boolean", mark(True), NOT_A_CELL),
    ("null", mark(None), NOT_A_CELL),
    ("a list", mark([5]), NOT_A_CELL),
    ("zero", mark(0), NOT_A_CELL),
    ("ten", mark(10), NOT_A_CELL),
    ("negative", mark(-1), NOT_A_CELL),
]


@pytest.mark.parametrize("message,said", [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_a_move_the_game_cannot_take_is_an_invalid_action(worker, test_task, message, said):
    game_ = episode(worker, first_index(test_task, "X", 0))
    out = game_.send(message)
    assert (out["finish"], out["status"], out["reward"]) == (True, "agent invalid action", 0.0)
    assert out["metric"]["outcome"] == "invalid" and out["metric"]["error"] == said
    assert out["messages"][0]["content"] == said
    calls = message.get("tool_calls") or []
    expected_roles = [("tool", call["id"]) for call in calls] or [("user", None)]
    assert [(m["role"], m.get("tool_call_id")) for m in out["messages"]] == expected_roles


def test_a_taken_cell_is_an_invalid_action(worker, test_task):
    index = first_index(test_task, "X", 2)
    occupied = test_task.samples[index].opening[1]   # the opening's O
    out = episode(worker, index).send(mark(occupied))
    assert (out["status"], out["reward"]) == ("agent invalid action", 0.0)
    assert out["messages"][0]["content"] == taken(occupied) == f"Cell {occupied} is taken."


def test_a_taken_cell_later_in_the_game_is_an_invalid_action(worker, test_task):
    game_ = episode(worker, first_index(test_task, "X", 0))
    out = game_.send(mark(5))
    reply = int(OPPONENT.search(out["messages"][0]["content"]).group(1))
    out = game_.send(mark(reply))
    assert (out["status"], out["messages"][0]["content"]) == ("agent invalid action",
                                                             taken(reply))


@pytest.mark.parametrize("arguments", ['{"cell": 5', "[5]", "5", "not json"])
def test_arguments_that_are_not_a_json_object_fail_validation(worker, test_task, arguments):
    out = episode(worker, first_index(test_task, "X", 0)).send(raw_call("mark", arguments))
    assert (out["finish"], out["status"], out["reward"]) == (True, "agent validation failed",
                                                             0.0)
    assert out["messages"] == [{"role": "tool", "tool_call_id": "0", "content": BAD_ARGUMENTS}]


def test_arguments_too_long_to_parse_fail_validation(worker, test_task):
    arguments = json.dumps({"cell": 5, "note": "x" * (MAX_ARGUMENT_CHARS + 1)})
    out = episode(worker, first_index(test_task, "X", 0)).send(raw_call("mark", arguments))
    assert (out["status"], out["reward"]) == ("agent validation failed", 0.0)
    assert "The call was not run" in out["messages"][0]["content"]


# --------------------------------------------------------------------------- whole games


def play(api: str, player, indices: list[int]) -> list[EpisodeRecord]:
    return asyncio.run(play_all(api, player, indices, concurrency=8, progress=False))


@pytest.fixture(scope="module")
def oracle_games(worker, test_task) -> list[EpisodeRecord]:
    return play(worker, load_oracle("tictactoe", test_task), test_task.indices())


@pytest.fixture(scope="module")
def random_games(worker, test_task) -> list[EpisodeRecord]:
    return play(worker, load_demonstrator("tictactoe", test_task), test_task.indices())


def check_ending(record: EpisodeRecord) -> None:
    """A finished game: its last reply shows the final board, which decides the reward."""
    assert record.error is None and record.status == "completed", record.reason()
    last = record.messages[-1]["content"]
    board = game.read_board(last)
    assert game.is_over(board) and record.reward == game.score(board, record.metrics["side"])
    said = {1.0: "You win.", 0.5: "Draw.", 0.0: "You lose."}[record.reward]
    assert last.splitlines()[0].endswith(said)
    assert record.metrics["outcome"] == {1.0: "win", 0.5: "draw", 0.0: "loss"}[record.reward]


def test_the_oracle_never_loses_a_test_game(oracle_games, test_task):
    assert [r.index for r in oracle_games] == test_task.indices()
    for record in oracle_games:
        check_ending(record)
        assert record.reward >= 0.5, f"the oracle lost game {record.index}"
    wins = sum(r.reward == 1.0 for r in oracle_games)
    assert wins / len(oracle_games) > 0.9   # against a random opponent it wins nearly always


def test_the_same_moves_meet_the_same_opponent(worker, test_task, random_games):
    """The opponent's moves are those `random.Random(seed)` draws, and a replay repeats them."""
    for record in random_games[:40]:
        sample = test_task.samples[record.index]
        rng, board = random.Random(sample.seed), sample.start()
        said = [int(m) for msg in record.messages if msg["role"] != "assistant"
                for m in OPPONENT.findall(msg["content"] or "")]
        predicted = []
        if game.to_move(board) != sample.side:
            predicted.append(game.random_move(rng, board))
            board = game.play(board, predicted[-1])
        for message in record.messages:
            if message["role"] == "assistant":
                board = game.play(board, json.loads(
                    message["tool_calls"][0]["function"]["arguments"])["cell"])
                if not game.is_over(board):
                    predicted.append(game.random_move(rng, board))
                    board = game.play(board, predicted[-1])
        assert said == predicted
    again = play(worker, Demonstrator(test_task), [r.index for r in random_games[:40]])
    assert [r.messages for r in again] == [r.messages for r in random_games[:40]]


@functools.cache
def uniform_win_chance(board: str, mark: str) -> float:
    """P(`mark` wins) when both sides pick uniformly among legal moves (exact, by recursion)."""
    if game.is_over(board):
        return float(game.winner(board) == mark)
    moves = game.legal_moves(board)
    return sum(uniform_win_chance(game.play(board, c), mark) for c in moves) / len(moves)


def test_the_reference_chances_from_the_empty_board():
    # Uniform random tic-tac-toe: X wins 737/1260, O 363/1260 (the rest are draws).
    assert uniform_win_chance(game.EMPTY_BOARD, "X") == pytest.approx(737 / 1260)
    assert uniform_win_chance(game.EMPTY_BOARD, "O") == pytest.approx(363 / 1260)


@pytest.mark.parametrize("side", game.MARKS)
def test_the_demonstrator_plays_uniformly_at_random(random_games, oracle_games, test_task,
                                                    side):
    """Its win rate as `side` over the test split is the uniform player's expected one, to
    within four standard errors (the games are seeded, so the check is fixed, not flaky)."""
    games = [r for r in random_games if r.metrics["side"] == side]
    for record in games:
        check_ending(record)
        for i, message in enumerate(record.messages):
            if message["role"] == "assistant":   # the free cells it read, then one call
                assert len(message["tool_calls"]) == 1
                board = current_board(record.messages[:i])
                assert message["content"] == game.free_cells_note(board)
    chances = [uniform_win_chance(test_task.samples[r.index].start(), side) for r in games]
    expected = sum(chances) / len(chances)
    rate = sum(r.reward == 1.0 for r in games) / len(games)
    tolerance = 4 * math.sqrt(sum(p * (1 - p) for p in chances)) / len(games)
    assert abs(rate - expected) <= tolerance, (rate, expected, tolerance)
    oracle = [r for r in oracle_games if r.metrics["side"] == side]
    assert rate < sum(r.reward == 1.0 for r in oracle) / len(oracle) - 0.25


def test_the_demonstrator_picks_each_legal_move_alike(random_games):
    """Over its moves in the test games, the rank of the cell it marks among the legal ones is
    uniform: the mean of (rank + 1/2) / choices is 1/2, and it marks the lowest legal cell as
    often as chance says, each within four standard errors."""
    ranks = []
    for record in random_games:
        for position, message in enumerate(record.messages):
            if message["role"] == "assistant":
                legal = game.legal_moves(current_board(record.messages[:position]))
                cell = json.loads(message["tool_calls"][0]["function"]["arguments"])["cell"]
                ranks.append((legal.index(cell), len(legal)))
    n = len(ranks)
    mean = sum((i + 0.5) / k for i, k in ranks) / n
    assert abs(mean - 0.5) <= 4 * math.sqrt(sum((k * k - 1) / (12 * k * k) for _, k in ranks)) / n
    lowest, chance = sum(i == 0 for i, _ in ranks), sum(1 / k for _, k in ranks)
    assert abs(lowest - chance) <= 4 * math.sqrt(sum(1 / k * (1 - 1 / k) for _, k in ranks))


# --------------------------------------------------------------------------- demonstrations


def test_the_warm_start_imitates_the_demonstrator_not_the_oracle(test_task, tmp_path,
                                                                  monkeypatch):
    assert type(load_demonstrator("tictactoe", test_task)) is Demonstrator
    assert type(load_oracle("tictactoe", test_task)) is Oracle
    monkeypatch.setattr(demonstrations, "cache_root", lambda: tmp_path)
    path = demonstrations.oracle_demos("tictactoe", "train", 6)
    demos = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(demos) == 6 and {d["task"] for d in demos} == {"tictactoe-train"}
    train = load_demonstrator("tictactoe", None)
    for demo in demos:
        history = []
        for message in demo["messages"]:
            if message["role"] == "assistant":
                assert message == train.next_message(demo["index"], history)
            history.append(message)
