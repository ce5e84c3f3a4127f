"""Tic-tac-toe's rules, board text, players and samples, in-process (no worker)."""

from __future__ import annotations

import random

import pytest

from environments.registry import load_task
from environments.tictactoe import game, samples
from environments.tictactoe.oracle import best_move, current_board, expected_score


def board_of(**cells: str) -> str:
    """A board with the given cells marked: board_of(c1="X", c5="O")."""
    board = list(game.EMPTY_BOARD)
    for name, mark in cells.items():
        board[int(name[1:]) - 1] = mark
    return "".join(board)


# --------------------------------------------------------------------------- rules


@pytest.mark.parametrize("line", game.LINES)
@pytest.mark.parametrize("mark", game.MARKS)
def test_three_in_a_row_wins_on_every_row_column_and_diagonal(line, mark):
    board = board_of(**{f"c{cell}": mark for cell in line})
    assert game.winner(board) == mark and game.is_over(board)
    assert game.legal_moves(board) == []   # a finished game has no moves
    assert game.score(board, mark) == 1.0 and game.score(board, game.other(mark)) == 0.0
    two = board_of(**{f"c{cell}": mark for cell in line[:2]})
    assert game.winner(two) is None and not game.is_over(two)


def test_the_winning_move_is_recognised_in_play():
    board = game.EMPTY_BOARD
    for cell in (1, 4, 2, 5):   # X 1, O 4, X 2, O 5
        board = game.play(board, cell)
    assert game.to_move(board) == "X" and game.winner(board) is None
    won = game.play(board, 3)
    assert won == "XXXOO...." and game.winner(won) == "X"


def test_a_full_board_without_a_line_is_a_draw():
    board = "XOXXOOOXX"
    assert game.check_board(board) == board
    assert game.winner(board) is None and game.is_over(board)
    assert game.legal_moves(board) == [] and game.score(board, "X") == game.score(board, "O") == 0.5


def test_legal_moves_are_the_empty_cells_and_sides_alternate_from_x():
    assert game.legal_moves(game.EMPTY_BOARD) == list(range(1, 10))
    assert game.to_move(game.EMPTY_BOARD) == "X"
    board = game.play(game.EMPTY_BOARD, 5)
    assert board == board_of(c5="X") and game.to_move(board) == "O"
    assert game.legal_moves(board) == [1, 2, 3, 4, 6, 7, 8, 9]
    assert game.play(board, 1) == board_of(c5="X", c1="O")
    for illegal in (5, 0, 10, -1):
        with pytest.raises(ValueError, match="not a legal move"):
            game.play(board, illegal)
    with pytest.raises(ValueError, match="not finished"):
        game.score(board, "X")


def test_minimax_values():
    assert game.value(game.EMPTY_BOARD, "X") == game.value(game.EMPTY_BOARD, "O") == 0
    assert game.value(board_of(c5="X", c2="O"), "X") == 1     # an edge reply to the centre loses
    assert game.value(board_of(c5="X", c1="O"), "X") == 0     # a corner reply holds
    assert game.value(board_of(c1="X", c2="X", c4="O", c5="O"), "O") == -1   # X to move wins


@pytest.mark.parametrize("board", ["XO", "XXXO.....", "X.....O.?", "XX.......", "OO.X.....",
                                   "XXXOOO...", "XXX.OO.O."])
def test_boards_that_no_game_reaches_are_refused(board):
    with pytest.raises(ValueError):
        game.check_board(board)


# --------------------------------------------------------------------------- board text


def test_the_board_is_drawn_with_empty_cells_numbered():
    assert game.draw_board(board_of(c1="X", c5="O")) == (
        " X | 2 | 3\n"
        "---+---+---\n"
        " 4 | O | 6\n"
        "---+---+---\n"
        " 7 | 8 | 9")


def test_the_free_cells_note_lists_every_cell_in_order():
    assert game.free_cells_note(board_of(c1="X", c5="O", c9="X")) == "Free: - 2 3 4 - 6 7 8 -"
    assert game.free_cells_note(game.EMPTY_BOARD) == "Free: 1 2 3 4 5 6 7 8 9"


def test_reading_the_drawn_board_gives_it_back():
    rng = random.Random(3)
    for _ in range(200):
        board = game.EMPTY_BOARD
        while not game.is_over(board) and rng.random() < 0.85:
            board = game.play(board, game.random_move(rng, board))
        text = f"You marked 1. The opponent (O) marked 2.\n{game.draw_board(board)}"
        assert game.read_board(text) == board
    with pytest.raises(ValueError, match="no board"):
        game.read_board("No move: call mark(cell).")
    with pytest.raises(ValueError, match="cell 2"):
        game.read_board(game.draw_board(game.EMPTY_BOARD).replace("| 2 |", "| 3 |"))


# --------------------------------------------------------------------------- players


def test_the_oracle_takes_a_win_and_blocks_a_loss():
    assert best_move(board_of(c1="X", c2="X", c4="O", c5="O")) == 3          # X wins at once
    assert best_move(board_of(c1="X", c2="X", c5="O")) == 3                  # O must block
    history = [{"role": "user", "content": game.draw_board(board_of(c1="X"))},
               {"role": "assistant", "content": ""},
               {"role": "tool", "content": "You marked 5. The opponent (X) marked 9.\n"
                                           + game.draw_board(board_of(c1="X", c5="O", c9="X"))}]
    assert current_board(history) == board_of(c1="X", c5="O", c9="X")


def test_the_oracle_scores_nearly_every_point_against_the_uniform_opponent():
    # From the empty board: 0.997 as X, 0.958 as O (a draw scores 0.5, and it never loses).
    assert expected_score(game.EMPTY_BOARD, "X") > 0.99
    assert expected_score(game.EMPTY_BOARD, "O") > 0.95


# --------------------------------------------------------------------------- samples


def test_splits_are_disjoint_deterministic_and_sized():
    test, train = samples.split_samples("test"), samples.split_samples("train")
    assert (len(test), len(train)) == (samples.TEST_SIZE, samples.TRAIN_SIZE)
    assert len(test) >= 500 and len(train) >= 3000
    assert not {s.seed for s in test} & {s.seed for s in train}   # no opponent is shared
    assert len({s.seed for s in test + train}) == len(test) + len(train)
    assert samples.split_samples("test") == test and samples.split_samples("train") == train
    # The test split is the front of the draw: a smaller train split leaves it as it is.
    assert samples.split_samples("test", train_size=10) == test
    assert samples.split_samples("train", train_size=10) == train[:10]
    with pytest.raises(ValueError, match="no split"):
        samples.split_samples("validation")


def test_samples_vary_and_every_start_is_open_and_not_lost():
    test = samples.split_samples("test")
    assert {s.side for s in test} == {"X", "O"}
    assert {len(s.opening) for s in test} == set(range(samples.MAX_OPENING + 1))
    for sample in test:
        board = sample.start()
        assert not game.is_over(board) and game.value(board, sample.side) >= 0
        assert samples.playable(sample)
    # A start the agent cannot hold is left out: O after X's centre and O's own edge reply.
    assert not samples.playable(samples.Sample(seed=1, side="O", opening=(5, 2)))
    assert samples.playable(samples.Sample(seed=1, side="X", opening=(5, 2)))


def test_the_task_serves_its_split_by_index():
    task = load_task("tictactoe", split="test")
    assert task.name == "tictactoe-test" and task.indices() == list(range(samples.TEST_SIZE))
    assert task.sample(3) == samples.split_samples("test")[3]
    for missing in (-1, samples.TEST_SIZE, "3"):
        with pytest.raises(ValueError, match="no sample"):
            task.sample(missing)


def test_the_seed_fixes_the_opponent():
    sample = samples.split_samples("test")[0]
    board = sample.start()

    def replies(rng: random.Random) -> list[int]:
        position, moves = board, []
        while not game.is_over(position):
            moves.append(game.random_move(rng, position))
            position = game.play(position, moves[-1])
        return moves

    assert replies(sample.opponent()) == replies(sample.opponent())
    assert replies(sample.opponent()) == replies(random.Random(sample.seed))
