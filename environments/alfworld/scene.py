"""The shared types of ALFWorld's game generator and planner: floor plans, scenes and goals.

`generate.py` builds a `Scene` and a `Goal` for a floor plan and `planner.py` plans a walkthrough
for them; both import these types from here, so neither imports the other's internals.
"""

from __future__ import annotations

import dataclasses
import random

from alfworld.gen import constants, goal_library


def mangle(name: str) -> str:
    """ALFRED's PDDL-safe spelling of an object id (PlannedGameState.fix_pddl_str_chars)."""
    for char, word in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"),
                       (",", "_comma_")):
        name = name.replace(char, word)
    return name


@dataclasses.dataclass
class FloorPlan:
    scene: int
    receptacles: dict[str, tuple[float, float, int, int]]   # ALFRED id -> (x, z, rot, horizon)
    object_types: list[str]

    @property
    def room(self) -> str:
        return next(room for room, scenes in constants.SCENE_TYPE.items() if self.scene in scenes)


def receptacle_type(receptacle_id: str) -> str:
    parts = receptacle_id.split("|")
    return parts[4] if len(parts) > 4 else parts[0]   # "Sink|x|y|z|SinkBasin" is a SinkBasin


@dataclasses.dataclass
class Scene:
    """One concrete household: receptacles at locations, objects in receptacles."""

    plan: FloorPlan
    receptacle_at: dict[str, str]            # receptacle id -> location
    contents: dict[str, str]                 # object id -> receptacle id
    agent_at: str

    def objects_of(self, object_type: str) -> list[str]:
        return sorted(o for o in self.contents if o.split("|")[0] == object_type)

    def receptacles_of(self, rtype: str) -> list[str]:
        return sorted(r for r in self.receptacle_at if receptacle_type(r) == rtype)


@dataclasses.dataclass(frozen=True)
class Goal:
    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""

    def sentence(self, rng: random.Random) -> str:
        template = rng.choice(goal_library.gdict[self.task_type]["templates"])
        return template.format(obj=self.object_target.lower(), recep=self.parent_target.lower(),
                               toggle=self.toggle_target.lower(), mrecep="")

    def pddl(self) -> str:
        text = goal_library.gdict[self.task_type]["pddl"].format(
            obj=self.object_target, recep=self.parent_target, toggle=self.toggle_target,
            mrecep="")
        text = text.replace("#", "-").strip()
        return text[:text.rfind(")")].rstrip()   # the library's text closes the (define ...)
