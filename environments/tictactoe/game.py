"""Tic-tac-toe rules, pure: the board, whose turn it is, legal moves, the winner, the value.

A board is a string of nine characters, the cells row by row from the top left: `X`, `O`, or
`EMPTY` (`.`). Cells are numbered 1 to 9 everywhere (as the agent sees them), so cell `c` is
`board[c - 1]`:

     1 | 2 | 3
    ---+---+---
     4 | 5 | 6
    ---+---+---
     7 | 8 | 9

X moves first, so whose turn it is follows from the board (`to_move`). A game is over when a
side has three in a row (`winner`) or no cell is empty; a finished board has no legal moves.

`value` is the game's minimax value (both sides playing perfectly); `random_move` is the
uniform player: the opponent of every episode and the warm start's demonstrator.
`draw_board` is the board as the agent reads it (empty cells show their numbers), and
`read_board` its exact inverse.
"""

from __future__ import annotations

import functools
import random
import re

EMPTY = "."
EMPTY_BOARD = EMPTY * 9
MARKS = ("X", "O")
CELLS = tuple(range(1, 10))
LINES = ((1, 2, 3), (4, 5, 6), (7, 8, 9),   # rows
         (1, 4, 7), (2, 5, 8), (3, 6, 9),   # columns
         (1, 5, 9), (3, 5, 7))              # diagonals

_ROW = re.compile(r"^ ([XO1-9]) \| ([XO1-9]) \| ([XO1-9])$", re.M)
_RULE = "---+---+---"


def other(mark: str) -> str:
    """The opposing mark: O for X, X for O."""
    return "O" if mark == "X" else "X"


def check_board(board: str) -> str:
    """`board` if it is a position reachable in play, else ValueError (why).

    Reachable: nine cells of X, O or EMPTY; X has as many marks as O or one more; at most one
    side has three in a row, and that side made the last move.
    """
    if len(board) != 9 or set(board) - {"X", "O", EMPTY}:
        raise ValueError(f"a board is nine of X, O and {EMPTY!r}, not {board!r}")
    xs, os = board.count("X"), board.count("O")
    if xs - os not in (0, 1):
        raise ValueError(f"{board!r} has {xs} X and {os} O; X moves first and sides alternate")
    lines = {board[a - 1] for a, b, c in LINES if board[a - 1] == board[b - 1] == board[c - 1]}
    lines.discard(EMPTY)
    if len(lines) > 1 or (lines == {"X"} and xs == os) or (lines == {"O"} and xs > os):
        raise ValueError(f"{board!r} is not a position of a game played by the rules")
    return board


def to_move(board: str) -> str:
    """Whose turn it is: X when both sides have as many marks, else O."""
    return "X" if board.count("X") == board.count("O") else "O"


def winner(board: str) -> str | None:
    """The mark with three in a row (a row, a column or a diagonal), or None."""
    for a, b, c in LINES:
        if board[a - 1] != EMPTY and board[a - 1] == board[b - 1] == board[c - 1]:
            return board[a - 1]
    return None


def is_over(board: str) -> bool:
    """A side has three in a row, or the board is full (a draw when nobody has)."""
    return winner(board) is not None or EMPTY not in board


def legal_moves(board: str) -> list[int]:
    """The empty cells, in order; none once the game is over."""
    if winner(board) is not None:
        return []
    return [cell for cell in CELLS if board[cell - 1] == EMPTY]


def play(board: str, cell: int) -> str:
    """The board after the side to move marks `cell`; ValueError for an illegal move."""
    if cell not in legal_moves(board):
        raise ValueError(f"cell {cell!r} is not a legal move on {board!r}")
    return board[:cell - 1] + to_move(board) + board[cell:]


def score(board: str, mark: str) -> float:
    """A finished game's reward for `mark`: 1 for a win, 0.5 for a draw, 0 for a loss."""
    if not is_over(board):
        raise ValueError(f"{board!r} is not finished")
    won = winner(board)
    return 0.5 if won is None else float(won == mark)


def value(board: str, mark: str) -> int:
    """The minimax value for `mark`: 1 if it wins against any defence, -1 if the other side
    can force a win, 0 if best play by both draws."""
    return _value_for_x(board) * (1 if mark == "X" else -1)


@functools.cache
def _value_for_x(board: str) -> int:
    """value(board, "X"): the side to move takes the best of its moves' values."""
    if is_over(board):
        won = winner(board)
        return 0 if won is None else (1 if won == "X" else -1)
    values = [_value_for_x(play(board, cell)) for cell in legal_moves(board)]
    return max(values) if to_move(board) == "X" else min(values)


def random_move(rng: random.Random, board: str) -> int:
    """A cell drawn uniformly among the legal moves, with `rng` (one draw per move)."""
    moves = legal_moves(board)
    if not moves:
        raise ValueError(f"{board!r} has no legal move")
    return rng.choice(moves)


def draw_board(board: str) -> str:
    """The board as the agent reads it: X and O, and each empty cell's number.

         X | 2 | 3
        ---+---+---
         4 | O | 6
        ---+---+---
         7 | 8 | 9
    """
    shown = [mark if mark != EMPTY else str(cell) for cell, mark in zip(CELLS, board, strict=True)]
    rows = [" " + " | ".join(shown[row:row + 3]) for row in (0, 3, 6)]
    return f"\n{_RULE}\n".join(rows)


def free_cells_note(board: str) -> str:
    """The empty cells as a player notes them before moving, one entry per cell in order: its
    number when empty, `-` when taken (`Free: 1 - 3 4 - - 7 8 -` for the board above)."""
    return "Free:" + "".join(f" {cell}" if mark == EMPTY else " -"
                             for cell, mark in zip(CELLS, board, strict=True))


def read_board(text: str) -> str:
    """The board `draw_board` drew: the last three board rows in `text`; ValueError if none."""
    rows = _ROW.findall(text)
    if len(rows) < 3:
        raise ValueError("the text shows no board")
    shown = [mark for row in rows[-3:] for mark in row]
    board = ""
    for cell, mark in zip(CELLS, shown, strict=True):
        if mark not in MARKS and mark != str(cell):
            raise ValueError(f"cell {cell} of the board shows {mark!r}")
        board += mark if mark in MARKS else EMPTY
    return check_board(board)
