"""The tic-tac-toe players: a minimax oracle that never loses, and the uniform demonstrator.

Both read the board from the environment's latest message, as an agent would
(`game.read_board`), and answer with one `mark` call.

`Oracle` plays a move that keeps the position's minimax value (so it never loses a sample,
whose start is never lost, and wins whenever it can force a win); among those moves it takes
the one with the highest expected reward against the opponent the task actually has, which
picks uniformly among legal moves (`expected_score`), lowest cell first on ties.

`Demonstrator` is the warm start's player (`environments.oracle --demonstrator`): it picks
uniformly among the legal moves, with a generator seeded by the sample index and the move
number, so its games are reproducible. Its demonstrations teach the format of a move (read the
board, call `mark` with an empty cell) and no strategy: that is left for RL to learn. Each of
its messages first notes the empty cells (`game.free_cells_note`), then calls `mark`: the note is
nine tokens a move that only reading the latest board predicts, a far denser lesson in reading it
than the one uniform choice among the legal cells (measured in configs/local_tictactoe.py).
"""

from __future__ import annotations

import functools
import random
from typing import Any

from environments.oracle import tool_call_message
from environments.tictactoe import TOOL_NAME, TicTacToeTask, game


def current_board(history: list[dict[str, Any]]) -> str:
    """The board of the environment's latest message in `history`."""
    for message in reversed(history):
        if message.get("role") != "assistant":
            return game.read_board(message.get("content") or "")
    raise ValueError("the environment has shown no board yet")


@functools.cache
def expected_score(board: str, mark: str) -> float:
    """`mark`'s expected reward from `board` when it plays `best_move` and the other side
    picks uniformly among its legal moves (1 win, 0.5 draw, 0 loss)."""
    if game.is_over(board):
        return game.score(board, mark)
    if game.to_move(board) == mark:
        return expected_score(game.play(board, best_move(board)), mark)
    moves = game.legal_moves(board)
    return sum(expected_score(game.play(board, cell), mark) for cell in moves) / len(moves)


@functools.cache
def best_move(board: str) -> int:
    """The oracle's move for the side to move: the highest `expected_score` among the moves
    that keep the minimax value, the lowest cell among equals."""
    mark = game.to_move(board)
    target = game.value(board, mark)
    keeping = [cell for cell in game.legal_moves(board)
               if game.value(game.play(board, cell), mark) == target]
    return max(keeping, key=lambda cell: (expected_score(game.play(board, cell), mark), -cell))


class Oracle:
    def __init__(self, task: TicTacToeTask) -> None:
        self.task = task

    def next_message(self, index: int, history: list[dict[str, Any]]) -> dict[str, Any]:
        board = current_board(history)
        cell = best_move(board)
        after = game.value(game.play(board, cell), game.to_move(board))
        plan = {1: "forces a win", 0: "holds the draw", -1: "loses to best play"}[after]
        return tool_call_message(TOOL_NAME, {"cell": cell}, f"Cell {cell} {plan}.")


class Demonstrator:
    def __init__(self, task: TicTacToeTask) -> None:
        self.task = task

    def next_message(self, index: int, history: list[dict[str, Any]]) -> dict[str, Any]:
        moves_made = sum(message.get("role") == "assistant" for message in history)
        rng = random.Random(f"tictactoe-demonstrator-{index}-{moves_made}")
        board = current_board(history)
        return tool_call_message(TOOL_NAME, {"cell": game.random_move(rng, board)},
                                 game.free_cells_note(board))
