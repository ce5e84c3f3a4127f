"""A small real stack for pipeline tests: tokenizer, tiny model, engine, trainer, echo fleet."""

import pytest


@pytest.fixture
def fleet():
    from environments.echo import EchoTask
    from tests.support.controller_fleet import ThreadFleet

    fleet = ThreadFleet()
    fleet.add_worker(EchoTask(rounds=2), concurrency=32)
    yield fleet
    fleet.close()


@pytest.fixture(scope="module")
def stack(tokenizer):
    """Engine and trainer, built (and compiled) once per module; each run starts fresh."""
    from tests.support.pipeline_stack import make_stack

    engine, trainer = make_stack(tokenizer)
    with engine:
        yield engine, trainer
