"""Whether the game's agent plays tactics: from a run's evaluation transcripts, how often it takes
a win on the spot, and how often it blocks where only the opponent threatens a line, against
chance (a uniform pick among the free cells).

    python -m benchmarks.probes.tictactoe_tactics --run-dir runs/local/tictactoe

Reads RUN_DIR/eval_before_episodes.jsonl and eval_after_episodes.jsonl (the transcripts the
evaluation writes); each of the agent's moves is scored against the board it was shown (the
last five lines of the message before it). Writes benchmarks/results/NAME.json with, per
evaluation, `WHEN_win_positions`, `WHEN_win_taken` and `WHEN_win_chance`, and the same for
`block`.
"""

from __future__ import annotations

import argparse
import json
import pathlib

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def board_of(message: str) -> list[str]:
    """The nine cells ("X", "O" or "" for free) of the board at the end of a message."""
    rows = [line for line in message.splitlines()[-5:] if "|" in line]
    cells = [c.strip() for row in rows for c in row.split("|")]
    return [c if c in ("X", "O") else "" for c in cells]


def completing_cells(board: list[str], mark: str) -> set[int]:
    """Free cells (0-based) that complete a line of `mark`."""
    out = set()
    for line in LINES:
        marks = [board[i] for i in line]
        if marks.count(mark) == 2 and marks.count("") == 1:
            out.add(line[marks.index("")])
    return out


def moves(episode: dict) -> list[tuple[list[str], str, int]]:
    """(board shown, the agent's mark, the cell it chose, 0-based) for each of its moves."""
    mark = "O" if "You are O" in episode["messages"][0]["content"] else "X"
    out = []
    for shown, reply in zip(episode["messages"], episode["messages"][1:], strict=False):
        calls = reply.get("tool_calls") or []
        if reply["role"] != "assistant" or not calls:
            continue
        try:
            cell = int(json.loads(calls[0]["function"]["arguments"])["cell"]) - 1
        except (ValueError, KeyError, TypeError):
            continue
        out.append((board_of(shown["content"]), mark, cell))
    return out


def tactics(episodes: list[dict]) -> dict[str, float]:
    """Win and block positions, the share the agent took, and chance's share."""
    counts = {k: [0, 0, 0.0] for k in ("win", "block")}   # positions, taken, chance
    for episode in episodes:
        for board, mark, cell in moves(episode):
            free = [i for i, c in enumerate(board) if not c]
            if not free:
                continue
            wins = completing_cells(board, mark)
            threats = completing_cells(board, "X" if mark == "O" else "O")
            kind, good = ("win", wins) if wins else ("block", threats) if threats else (None, set())
            if kind is None:
                continue
            counts[kind][0] += 1
            counts[kind][1] += cell in good
            counts[kind][2] += len(good) / len(free)
    figures: dict[str, float] = {}
    for kind, (positions, taken, chance) in counts.items():
        figures[f"{kind}_positions"] = positions
        figures[f"{kind}_taken"] = round(taken / positions, 3) if positions else float("nan")
        figures[f"{kind}_chance"] = round(chance / positions, 3) if positions else float("nan")
    return figures


def run_dir_name(path: pathlib.Path) -> str:
    """The run directory as the project names it (from its `runs/` folder on), not where this
    machine keeps it: no host path goes into a committed result."""
    parts = path.resolve().parts
    if "runs" not in parts:
        return path.name
    last_runs = len(parts) - 1 - parts[::-1].index("runs")
    return "/".join(parts[last_runs:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=pathlib.Path,
                        default=pathlib.Path("runs/local/tictactoe"))
    parser.add_argument("--name", default="tictactoe_tactics", help="benchmarks/results/NAME.json")
    args = parser.parse_args()

    from benchmarks.machine_info import write_result

    figures: dict[str, object] = {"run_dir": run_dir_name(args.run_dir)}
    for when in ("before", "after"):
        path = args.run_dir / f"eval_{when}_episodes.jsonl"
        episodes = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for key, value in tactics(episodes).items():
            figures[f"{when}_{key}"] = value
        print(f"{when}: wins taken {figures[f'{when}_win_taken']} of "
              f"{figures[f'{when}_win_positions']} (chance {figures[f'{when}_win_chance']}), "
              f"blocks {figures[f'{when}_block_taken']} of {figures[f'{when}_block_positions']} "
              f"(chance {figures[f'{when}_block_chance']})")
    print("wrote", write_result(args.name, figures, dots=False))


if __name__ == "__main__":
    main()
