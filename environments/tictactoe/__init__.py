"""Tic-tac-toe against a random opponent, one `mark(cell)` call per move.

The agent plays one side of a game (`samples.Sample`: the opponent's seed, the agent's mark,
a short opening) against an opponent that picks uniformly among the legal moves. Messages are
short and always in the same form, for a small model with a small context:

    user  Tic-tac-toe. You are O; three in a row wins. Call mark(cell) with an empty cell's
          number.                                         (then, if it moved first:)
          The opponent (X) marked 5.
           1 | 2 | 3
          ---+---+---
           4 | X | 6
          ---+---+---
           7 | 8 | 9
    tool  You marked 1. The opponent (X) marked 9.        (the board follows each reply)
    tool  You marked 3. The opponent (X) marked 2. You lose.

Endings: a win is `completed` with reward 1 (a success), a draw `completed` with 0.5, a loss
`completed` with 0. A turn the game cannot take ends it with reward 0, charged to the agent:
`agent invalid action` for no tool call, several calls, another tool, a `cell` missing or not
an integer from 1 to 9, or a taken cell; `agent validation failed` for arguments that are not
a JSON object or are too long to parse (input the worker cannot act on, as
`agentrl_jax/episode.py` defines it). The reply says why.

The rules are in `game`, the samples and splits in `samples`; `oracle` holds the minimax
player and the uniform player whose games are the warm start's demonstrations.
"""

from __future__ import annotations

from typing import Any

from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.episode import SampleIndex, SampleStatus
from environments.tictactoe import game, samples
from environments.worker import AgentTurn, EpisodeResult, Session, Task, ToolCall

TOOL_NAME = "mark"
MARK_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": TOOL_NAME, "description": "Marks an empty cell with your symbol.",
    "parameters": {"type": "object",
                   "properties": {"cell": {"type": "integer", "minimum": 1, "maximum": 9}},
                   "required": ["cell"]}}}

INTRO = ("Tic-tac-toe. You are {side}; three in a row wins. "
         "Call mark(cell) with an empty cell's number.")
# reward: (the outcome metric, what the last reply says)
OUTCOMES = {1.0: ("win", "You win."), 0.5: ("draw", "Draw."), 0.0: ("loss", "You lose.")}
NO_CALL = "No move: call mark(cell)."
ONE_CALL = "One mark per turn."
UNKNOWN_TOOL = "The only tool is mark(cell)."
NOT_A_CELL = "cell must be an integer from 1 to 9."
BAD_ARGUMENTS = 'The arguments must be a JSON object such as {"cell": 5}.'


def taken(cell: int) -> str:
    return f"Cell {cell} is taken."


class TicTacToeTask(Task):
    tools = [MARK_TOOL]
    concurrency = 64

    def __init__(self, split: str = "train", train_size: int = samples.TRAIN_SIZE,
                 test_size: int = samples.TEST_SIZE) -> None:
        self.name = task_key("tictactoe", split)
        self.samples = samples.split_samples(split, train_size, test_size)

    def indices(self) -> list[SampleIndex]:
        return list(range(len(self.samples)))

    def sample(self, index: SampleIndex) -> samples.Sample:
        if not isinstance(index, int) or not 0 <= index < len(self.samples):
            raise ValueError(f"{self.name} has no sample {index!r}")
        return self.samples[index]

    async def episode(self, index: SampleIndex, session: Session) -> EpisodeResult:
        sample = self.sample(index)
        agent, rival = sample.side, game.other(sample.side)
        opponent, board = sample.opponent(), sample.start()
        metrics: dict[str, Any] = {"side": agent, "opening": len(sample.opening), "moves": 0}
        news = ""
        if game.to_move(board) == rival:
            first = game.random_move(opponent, board)
            board = game.play(board, first)
            news = f"The opponent ({rival}) marked {first}.\n"
        session.inject({"role": "user",
                        "content": f"{INTRO.format(side=agent)}\n{news}{game.draw_board(board)}"})
        while True:
            turn = await session.action()
            cell, refusal, status = read_move(turn, board)
            if cell is None:
                answer(session, turn.tool_calls(), refusal)
                return EpisodeResult(status, 0.0, {**metrics, "outcome": "invalid",
                                                   "error": refusal})
            metrics["moves"] += 1
            board = game.play(board, cell)
            text = f"You marked {cell}."
            if not game.is_over(board):
                reply = game.random_move(opponent, board)
                board = game.play(board, reply)
                text += f" The opponent ({rival}) marked {reply}."
            if game.is_over(board):
                reward = game.score(board, agent)
                outcome, said = OUTCOMES[reward]
                answer(session, turn.tool_calls(), f"{text} {said}\n{game.draw_board(board)}")
                return EpisodeResult(SampleStatus.COMPLETED, reward,
                                     {**metrics, "outcome": outcome})
            answer(session, turn.tool_calls(), f"{text}\n{game.draw_board(board)}")


def read_move(turn: AgentTurn, board: str) -> tuple[int | None, str, SampleStatus]:
    """The cell the agent's turn marks, or (None, why not, the status that ends the game)."""
    calls = turn.tool_calls()
    invalid = SampleStatus.AGENT_INVALID_ACTION
    if not calls:
        return None, NO_CALL, invalid
    if len(calls) > 1:
        return None, ONE_CALL, invalid
    call: ToolCall = calls[0]
    if call.error or call.arguments is None:
        return None, call.error or BAD_ARGUMENTS, SampleStatus.AGENT_VALIDATION_FAILED
    if call.name != TOOL_NAME:
        return None, UNKNOWN_TOOL, invalid
    cell = call.arguments.get("cell")
    if type(cell) is not int or cell not in game.CELLS:   # bool is an int subclass: refused
        return None, NOT_A_CELL, invalid
    if cell not in game.legal_moves(board):
        return None, taken(cell), invalid
    return cell, "", SampleStatus.RUNNING


def answer(session: Session, calls: list[ToolCall], text: str) -> None:
    """Says `text` in reply to every call of the turn (as the user when it made none)."""
    if not calls:
        session.inject({"role": "user", "content": text})
    for call in calls:
        session.inject({"role": "tool", "tool_call_id": call.id, "content": text})


TASK = TicTacToeTask
