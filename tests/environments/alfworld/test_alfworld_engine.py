"""The engine's Fast Downward library copies: reused across games, never shared by open games."""

from __future__ import annotations

from environments.alfworld import engine, games


def _two_games(root):
    files = games.list_games(root, "test")
    return files[0], files[1]


def test_a_closed_game_gives_its_library_copy_to_the_next(small_data):
    first_file, second_file = _two_games(small_data)
    fresh = engine.AlfworldGame(second_file).reset()   # what the second game shows on its own copy
    with engine.AlfworldGame(first_file) as first:
        first.reset()
        free_while_open = engine.library_copies_free()
    assert engine.library_copies_free() == free_while_open + 1
    with engine.AlfworldGame(second_file) as second:
        assert engine.library_copies_free() == free_while_open   # reused, none loaded
        reused = second.reset()
    assert reused.text == fresh.text
    assert reused.admissible_commands == fresh.admissible_commands


def test_open_games_keep_their_own_planner_state(small_data):
    first_file, second_file = _two_games(small_data)
    with engine.AlfworldGame(first_file) as a, engine.AlfworldGame(second_file) as b:
        start_a, start_b = a.reset(), b.reset()
        moved = a.step(next(c for c in start_a.admissible_commands if c.startswith("go to")))
        # b's state is untouched by a's step: its admissible actions are still its start's.
        assert b.step("look").admissible_commands == start_b.admissible_commands
        assert moved.admissible_commands != start_a.admissible_commands
