"""A hand-coded planner for generated ALFWorld games: the walkthrough the oracle replays.

The plan is ALFWorld's expert strategy (fetch the target, change its state at the appliance,
deliver it), written in the engine's own command words and demangled names. Names follow the
`alfworld` package's Demangler: ids are the lower-cased mangled PDDL names, numbered per kind in
sorted order with the highest number first (`Demangler` pops from [1..count]).
"""

from __future__ import annotations

from collections import Counter

from alfworld.gen import constants

from environments.alfworld.scene import Goal, Scene, mangle, receptacle_type

_APPLIANCE_VERB = {"pick_clean_then_place_in_recep": ("SinkBasin", "clean"),
                   "pick_heat_then_place_in_recep": ("Microwave", "heat"),
                   "pick_cool_then_place_in_recep": ("Fridge", "cool")}


def demangled_names(ids: list[str]) -> dict[str, str]:
    """Display names of PDDL ids, exactly as alfworld's `Demangler.demangle_alfred_name`."""
    ids = sorted(ids)
    kinds = {}
    for pddl_id in ids:
        head, bar, _ = pddl_id.partition("_bar_")
        if bar:
            kinds[pddl_id] = head + ("basin" if "basin" in pddl_id else "")
    remaining = {kind: list(range(1, count + 1)) for kind, count in Counter(kinds.values()).items()}
    names = {}
    for pddl_id in ids:
        if pddl_id in kinds:
            names[pddl_id] = f"{kinds[pddl_id]} {remaining[kinds[pddl_id]].pop()}"
        else:
            names[pddl_id] = f"{pddl_id} "
    return names


def scene_names(scene: Scene) -> dict[str, str]:
    """ALFRED id -> display name for every object, receptacle and location of the scene."""
    raw = list(scene.contents) + list(scene.receptacle_at)
    raw += sorted(set(scene.receptacle_at.values()) | {scene.agent_at})
    lowered = {mangle(x).lower(): x for x in raw}
    return {lowered[k]: v for k, v in demangled_names(list(lowered)).items()}


def plan_walkthrough(scene: Scene, goal: Goal) -> list[str]:
    """The commands that win the game from its initial state."""
    names = scene_names(scene)
    opened: set[str] = set()
    plan: list[str] = []

    def visit(receptacle: str) -> None:
        plan.append(f"go to {names[receptacle]}")
        if receptacle_type(receptacle) in constants.OPENABLE_CLASS_SET and receptacle not in opened:
            plan.append(f"open {names[receptacle]}")
            opened.add(receptacle)

    def fetch(obj: str) -> None:
        visit(scene.contents[obj])
        plan.append(f"take {names[obj]} from {names[scene.contents[obj]]}")

    # Prefer objects that are not locked away behind a door: fewer steps, same outcome.
    def cost(obj: str) -> tuple[bool, str]:
        return (receptacle_type(scene.contents[obj]) in constants.OPENABLE_CLASS_SET, obj)

    targets = sorted(scene.objects_of(goal.object_target), key=cost)
    if goal.task_type == "look_at_obj_in_light":
        fetch(targets[0])
        lamp = scene.objects_of(goal.toggle_target)[0]
        visit(scene.contents[lamp])
        plan.append(f"use {names[lamp]}")
        return plan

    destination = scene.receptacles_of(goal.parent_target)[0]
    count = 2 if goal.task_type == "pick_two_obj_and_place" else 1
    for obj in targets[:count]:
        fetch(obj)
        if goal.task_type in _APPLIANCE_VERB:
            appliance_type, verb = _APPLIANCE_VERB[goal.task_type]
            appliance = scene.receptacles_of(appliance_type)[0]
            plan.append(f"go to {names[appliance]}")
            plan.append(f"{verb} {names[obj]} with {names[appliance]}")
        visit(destination)
        plan.append(f"move {names[obj]} to {names[destination]}")
    return plan
