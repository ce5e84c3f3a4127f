"""The tic-tac-toe samples and their splits: who plays which side, from where, against whom.

A sample is `(seed, side, opening)`: the agent plays `side` (X moves first) from the position
the `opening` (0 to `MAX_OPENING` cells, marked alternately from X) leaves, against an
opponent that draws each of its moves uniformly among the legal ones with
`random.Random(seed)` (`Sample.opponent`): replaying a sample with the same agent moves gives
the same opponent moves. When the opening leaves the opponent to move, it moves first.

A sample is kept only if its starting position is open and not lost: the game is not over and
the agent's minimax value there is a draw or a win (`playable`), so a perfect player wins or
draws every sample.

The splits are one deterministic draw of distinct samples (no two share a seed) cut in two:
the first `test_size` are the test split, the next `train_size` the train split. So they never
overlap, and the test split stays the same whatever `train_size` is. The launchers' validation
slice is held out of the train split (`agentrl_jax.evaluation.protocol`), so it never meets the
test split either. Train and test share openings (there are few of them); their opponents'
seeds differ.
"""

from __future__ import annotations

import dataclasses
import random

from environments.tictactoe import game

SPLITS = ("train", "test")
MAX_OPENING = 2      # plies pre-played before the agent's first move
TRAIN_SIZE = 5000
TEST_SIZE = 500
_DRAW_SEED = 0       # the one draw both splits are cut from


@dataclasses.dataclass(frozen=True)
class Sample:
    """One game: the opponent's seed, the agent's mark, the cells pre-played from X."""

    seed: int
    side: str
    opening: tuple[int, ...]

    def start(self) -> str:
        """The board after the opening."""
        board = game.EMPTY_BOARD
        for cell in self.opening:
            board = game.play(board, cell)
        return board

    def opponent(self) -> random.Random:
        """A fresh generator for the opponent's moves: one `game.random_move` draw per move."""
        return random.Random(self.seed)


def playable(sample: Sample) -> bool:
    """The starting position is open and the agent, playing perfectly, cannot lose it."""
    board = sample.start()
    return not game.is_over(board) and game.value(board, sample.side) >= 0


def draw_samples(count: int, seed: int = _DRAW_SEED) -> list[Sample]:
    """The first `count` playable samples of the draw seeded with `seed`, with distinct seeds."""
    rng = random.Random(seed)
    samples: dict[int, Sample] = {}   # by opponent seed
    while len(samples) < count:
        opponent_seed = rng.getrandbits(32)
        side = rng.choice(game.MARKS)
        board, opening = game.EMPTY_BOARD, []
        for _ in range(rng.randint(0, MAX_OPENING)):
            opening.append(game.random_move(rng, board))
            board = game.play(board, opening[-1])
        sample = Sample(opponent_seed, side, tuple(opening))
        if opponent_seed not in samples and playable(sample):
            samples[opponent_seed] = sample
    return list(samples.values())


def split_samples(split: str, train_size: int = TRAIN_SIZE,
                  test_size: int = TEST_SIZE) -> list[Sample]:
    """The samples of `split` ("train" or "test"), in index order."""
    if split not in SPLITS:
        raise ValueError(f"tic-tac-toe has no split {split!r}; known: {', '.join(SPLITS)}")
    drawn = draw_samples(test_size + train_size)
    return drawn[:test_size] if split == "test" else drawn[test_size:]
