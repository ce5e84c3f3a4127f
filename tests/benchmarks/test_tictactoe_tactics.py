"""The game-tactics probe scores each move against the board the agent was shown."""

import json

from benchmarks.probes import tictactoe_tactics as tactics_lib

START = "Tic-tac-toe. You are O; three in a row wins. Call mark(cell) with an empty cell's number."


def board(rows: list[str]) -> str:
    return "\n---+---+---\n".join(" " + " | ".join(r) for r in rows)


def episode(shown: str, cell: int) -> dict:
    call = {"id": "0", "type": "function",
            "function": {"name": "mark", "arguments": json.dumps({"cell": cell})}}
    return {"messages": [{"role": "user", "content": f"{START}\n{shown}"},
                         {"role": "assistant", "content": "", "tool_calls": [call]}]}


def test_board_of_reads_marks_and_free_cells():
    shown = board([["O", "2", "X"], ["4", "X", "6"], ["7", "8", "9"]])
    assert tactics_lib.board_of(f"You marked 1.\n{shown}") == [
        "O", "", "X", "", "X", "", "", "", ""]


def test_a_win_on_the_spot_taken_and_missed():
    # O holds 1 and 5, so 9 wins; X threatens 3-6-9 too, but a win available is scored as a win
    shown = board([["O", "2", "X"], ["4", "O", "X"], ["7", "8", "9"]])
    taken = tactics_lib.tactics([episode(shown, 9)])
    missed = tactics_lib.tactics([episode(shown, 2)])
    assert taken["win_positions"] == missed["win_positions"] == 1
    assert taken["win_taken"] == 1.0 and missed["win_taken"] == 0.0
    assert taken["win_chance"] == 1 / 5   # one winning cell of five free
    assert taken["block_positions"] == 0


def test_a_block_where_only_the_opponent_threatens():
    shown = board([["X", "X", "3"], ["4", "O", "6"], ["7", "8", "9"]])
    f = tactics_lib.tactics([episode(shown, 3), episode(shown, 7)])
    assert f["block_positions"] == 2 and f["block_taken"] == 0.5
    assert f["block_chance"] == round(1 / 6, 3) and f["win_positions"] == 0


def test_the_result_names_the_run_directory_without_the_host_path(tmp_path):
    assert tactics_lib.run_dir_name(tmp_path / "clone" / "runs" / "local" / "tictactoe") == (
        "runs/local/tictactoe")
    assert tactics_lib.run_dir_name(tmp_path / "elsewhere") == "elsewhere"
