"""Generates ALFWorld games (`game.tw-pddl` + `traj_data.json`) from the `alfworld` package data.

ALFWorld's own game files are built from ALFRED trajectories that are not downloadable here. What
the package does ship is enough to build equivalent games: the PDDL domain (`alfred.pddl`), the
text grammar (`alfred.twl2`), the goal library (`gen/goal_library.py`: goal PDDL and the goal
sentences), the object/receptacle constants (`gen/constants.py`: which receptacle holds which
object, which objects heat/cool/clean/toggle) and, per AI2-THOR floor plan, the receptacle
instances with their poses (`FloorPlanN-openable.json`) and the object types in the scene
(`FloorPlanN-objects.json`).

A game is written the way `alfworld-generate` writes one: JSON with `pddl_domain`, `grammar`
(its "UNKNOWN GOAL" replaced by a templated goal sentence), `pddl_problem`, `solvable` and
`walkthrough`, in the official folder layout
`json_2.1.1/<split>/<task_type>-<Object>-<Mrecep>-<Receptacle>-<scene>/trial_<id>/`. The problem
uses ALFRED's naming (`Apple|-00.47|+01.15|+00.48` mangled to
`Apple_bar__minus_00_dot_47_bar__plus_01_dot_15_bar__plus_00_dot_48`, locations
`loc|x|z|rotation|horizon`), so the engine's name demangling gives the familiar "apple 1".

Train games use ALFRED's train floor plans, test games (`valid_unseen`) its test floor plans, so
the two never share a room. Everything is drawn from `random.Random(seed)`: the same seed gives
byte-identical files.
"""

from __future__ import annotations

import importlib.resources
import json
import random
from typing import Any

from alfworld.gen import constants

from environments.alfworld.planner import plan_walkthrough
from environments.alfworld.scene import FloorPlan, Goal, Scene, mangle, receptacle_type

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SPLIT_FOLDERS = {"train": "train", "test": "valid_unseen"}

# Which appliance a state-change task needs, and the room types ALFRED allows it in.
_APPLIANCE = {"pick_clean_then_place_in_recep": "SinkBasin",
              "pick_heat_then_place_in_recep": "Microwave",
              "pick_cool_then_place_in_recep": "Fridge"}
_ACTION_CLASS = {"pick_clean_then_place_in_recep": "Cleanable",
                 "pick_heat_then_place_in_recep": "Heatable",
                 "pick_cool_then_place_in_recep": "Coolable"}
# Receptacles AI2-THOR scenes have but `-openable.json` leaves out (no open/close pose recorded).
_EXTRA_RECEPTACLES = ("StoveBurner", "CoffeeMachine", "Toaster", "LaundryHamper")
_LAMP_HOLDERS = ("Desk", "SideTable", "Dresser", "Nightstand")
_STATIC_RECEPTACLES = constants.RECEPTACLES - set(constants.MOVABLE_RECEPTACLES)
_PLACEABLE = {obj for objs in constants.VAL_RECEPTACLE_OBJECTS.values() for obj in objs}


def package_text(relative: str) -> str:
    return importlib.resources.files("alfworld").joinpath(relative).read_text()


def load_floor_plan(scene: int) -> FloorPlan:
    layouts = importlib.resources.files("alfworld").joinpath("gen/layouts")
    poses = json.loads(layouts.joinpath(f"FloorPlan{scene}-openable.json").read_text())
    types = json.loads(layouts.joinpath(f"FloorPlan{scene}-objects.json").read_text())
    receptacles = {key: tuple(pose) for key, pose in sorted(poses.items())}
    return FloorPlan(scene, receptacles, sorted(set(types)))


def location_of(pose: tuple[float, float, int, int]) -> str:
    x, z, rotation, horizon = pose
    return f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{int(rotation) // 90}|{int(horizon)}"


def _coordinate(rng: random.Random, low: float, high: float) -> str:
    value = rng.uniform(low, high)
    return f"{value:+06.2f}" if abs(value) >= 0.005 else "00.00"


def build_scene(plan: FloorPlan, rng: random.Random, must_have: dict[str, int]) -> Scene:
    """Places receptacles and 1-3 instances of each pickupable object type of the floor plan."""
    receptacle_at = {rid: location_of(pose) for rid, pose in plan.receptacles.items()
                     if receptacle_type(rid) in _STATIC_RECEPTACLES}
    anchors = sorted(plan.receptacles.values())
    for rtype in _EXTRA_RECEPTACLES:
        if rtype in plan.object_types and not any(
                receptacle_type(r) == rtype for r in receptacle_at):
            for _ in range(4 if rtype == "StoveBurner" else 1):
                x, z, rotation, horizon = rng.choice(anchors)
                x += 0.25 * rng.randint(-3, 3)
                rid = f"{rtype}|{_coordinate(rng, -2, 2)}|{_coordinate(rng, 0.5, 1)}|" \
                      f"{_coordinate(rng, -2, 2)}"
                receptacle_at[rid] = location_of((x, z, rotation, horizon))
    used = set(receptacle_at.values())
    while True:
        x, z = rng.randint(-12, 12), rng.randint(-12, 12)
        agent_at = f"loc|{x}|{z}|{rng.randint(0, 3)}|30"
        if agent_at not in used:
            break

    contents: dict[str, str] = {}
    rtypes = {receptacle_type(r) for r in receptacle_at}
    for otype in sorted(plan.object_types):
        if otype == "DeskLamp":
            holders = [r for r in receptacle_at if receptacle_type(r) in _LAMP_HOLDERS]
            count = 1 if holders else 0
        else:
            holders = [r for r in receptacle_at
                       if otype in constants.VAL_RECEPTACLE_OBJECTS.get(receptacle_type(r), ())]
            if otype not in _PLACEABLE or otype in rtypes - set(constants.MOVABLE_RECEPTACLES):
                continue
            # Fewer distractors than ALFRED's 1-3 of everything: grounding time grows with
            # objects x receptacles, and every episode pays it when the engine loads the game.
            if otype in must_have:
                count = max(rng.randint(1, constants.MAX_NUM_OF_OBJ_INSTANCES), must_have[otype])
            else:
                count = rng.randint(1, 2) if rng.random() < 0.7 else 0
        for _ in range(count if holders else 0):
            while True:
                oid = f"{otype}|{_coordinate(rng, -3, 3)}|{_coordinate(rng, 0, 2)}|" \
                      f"{_coordinate(rng, -3, 3)}"
                if oid not in contents:
                    break
            contents[oid] = rng.choice(sorted(holders))
    return Scene(plan, receptacle_at, contents, agent_at)


def candidate_goals(plan: FloorPlan, task_type: str) -> list[Goal]:
    """Every (object, receptacle) pair this floor plan supports for `task_type`."""
    if plan.room not in constants.GOALS_VALID[task_type]:
        return []
    types = set(plan.object_types)
    rtypes = {receptacle_type(r) for r in plan.receptacles} & _STATIC_RECEPTACLES
    rtypes |= {r for r in _EXTRA_RECEPTACLES if r in types}
    objects = sorted(t for t in types if t in _PLACEABLE and t not in _STATIC_RECEPTACLES)
    if task_type == "look_at_obj_in_light":
        if "DeskLamp" not in types or not rtypes & set(_LAMP_HOLDERS):
            return []
        light_objects = {"AlarmClock", "Book", "Bowl", "CD", "CellPhone", "CreditCard", "Cup",
                         "KeyChain", "Laptop", "Mug", "Newspaper", "Pen", "Pencil", "Pillow",
                         "RemoteControl", "Statue", "TeddyBear", "TissueBox", "Vase", "Watch",
                         "Box", "Plate", "BaseballBat", "BasketBall", "TennisRacket"}
        return [Goal(task_type, o, toggle_target="DeskLamp") for o in objects
                if o in light_objects]
    appliance = _APPLIANCE.get(task_type)
    if appliance and appliance not in rtypes:
        return []
    goals = []
    for obj in objects:
        if appliance and obj not in constants.VAL_ACTION_OBJECTS[_ACTION_CLASS[task_type]]:
            continue
        for recep in sorted(rtypes):
            if recep == appliance or obj not in constants.VAL_RECEPTACLE_OBJECTS.get(recep, ()):
                continue
            goals.append(Goal(task_type, obj, parent_target=recep))
    return goals


def problem_pddl(scene: Scene, goal: Goal, problem_id: str) -> str:
    """The PDDL problem in ALFRED's layout (PlannedGameState.state_to_pddl), ids mangled."""
    m = mangle
    objects = sorted(scene.contents)
    receptacles = sorted(scene.receptacle_at)
    locations = sorted(set(scene.receptacle_at.values()) | {scene.agent_at})
    otypes = sorted(constants.OBJECTS_SET - _STATIC_RECEPTACLES)
    rtypes = sorted(_STATIC_RECEPTACLES)
    scene_rtypes = sorted({receptacle_type(r) for r in receptacles})
    scene_otypes = sorted({o.split("|")[0] for o in objects})

    def otype(o: str) -> str:
        return o.split("|")[0]

    lines = [f"(define (problem plan_{m(problem_id)})", "    (:domain alfred)", "    (:objects",
             "        agent1 - agent"]
    lines += [f"        {t}Type - otype" for t in otypes]
    lines += [f"        {t}Type - rtype" for t in rtypes]
    lines += [f"        {m(o)} - object" for o in objects]
    lines += [f"        {m(r)} - receptacle" for r in receptacles]
    lines += [f"        {m(loc)} - location" for loc in locations]
    lines += ["        )", "    (:init", "        (= (total-cost) 0)"]
    lines += [f"        (receptacleType {m(r)} {receptacle_type(r)}Type)" for r in receptacles]
    lines += [f"        (objectType {m(o)} {otype(o)}Type)" for o in objects]
    lines += [f"        (canContain {rt}Type {ot}Type)" for rt in scene_rtypes
              for ot in scene_otypes if ot in constants.VAL_RECEPTACLE_OBJECTS.get(rt, ())]
    lines += [f"        (openable {m(r)})" for r in receptacles
              if receptacle_type(r) in constants.OPENABLE_CLASS_SET]
    lines.append(f"        (atLocation agent1 {m(scene.agent_at)})")
    for label, cls in (("cleanable", "Cleanable"), ("heatable", "Heatable"),
                       ("coolable", "Coolable"), ("sliceable", "Sliceable"),
                       ("toggleable", "Toggleable")):
        lines += [f"        ({label} {m(o)})" for o in objects
                  if otype(o) in constants.VAL_ACTION_OBJECTS[cls]]
    lines += [f"        (pickupable {m(o)})" for o in objects if otype(o) in _PLACEABLE]
    lines += [f"        (isReceptacleObject {m(o)})" for o in objects
              if otype(o) in constants.MOVABLE_RECEPTACLES_SET]
    lines += [f"        (receptacleAtLocation {m(r)} {m(scene.receptacle_at[r])})"
              for r in receptacles]
    lines += [f"        (objectAtLocation {m(o)} {m(scene.receptacle_at[scene.contents[o]])})"
              for o in objects]
    lines += [f"        (inReceptacle {m(o)} {m(scene.contents[o])})" for o in objects]
    lines += ["        )", "        " + goal.pddl(), "    )"]
    return "\n".join(lines) + "\n"


def goal_holds_initially(scene: Scene, goal: Goal) -> bool:
    if goal.task_type == "look_at_obj_in_light":
        return False
    inside = [o for o in scene.objects_of(goal.object_target)
              if receptacle_type(scene.contents[o]) == goal.parent_target]
    needed = 2 if goal.task_type == "pick_two_obj_and_place" else 1
    state_change = goal.task_type in _APPLIANCE
    return len(inside) >= needed and not state_change


def make_game(scene_number: int, task_type: str, rng: random.Random) -> dict[str, Any] | None:
    """One game on floor plan `scene_number`, or None when the plan cannot host `task_type`."""
    plan = load_floor_plan(scene_number)
    goals = candidate_goals(plan, task_type)
    if not goals:
        return None
    goal = rng.choice(goals)
    need = 2 if task_type == "pick_two_obj_and_place" else 1
    for _ in range(20):
        scene = build_scene(plan, rng, must_have={goal.object_target: need})
        have = scene.objects_of(goal.object_target)
        if goal.parent_target and not scene.receptacles_of(goal.parent_target):
            return None
        if len(have) < need or goal_holds_initially(scene, goal):
            continue
        # The goal's receptacle must not already hold a target object (ALFRED samples so).
        if any(receptacle_type(scene.contents[o]) == goal.parent_target for o in have):
            continue
        if task_type == "look_at_obj_in_light" and not scene.objects_of("DeskLamp"):
            return None
        break
    else:
        return None
    trial = f"trial_G{rng.getrandbits(40):012x}"
    walkthrough = plan_walkthrough(scene, goal)
    sentence = goal.sentence(rng)
    grammar = package_text("data/alfred.twl2").replace("UNKNOWN GOAL", sentence)
    problem = problem_pddl(scene, goal, trial)
    return {
        "folder": f"{task_type}-{goal.object_target}-None-"
                  f"{goal.parent_target or goal.toggle_target}-{scene_number}/{trial}",
        "traj_data": {
            "task_type": task_type, "task_id": trial,
            "scene": {"floor_plan": f"FloorPlan{scene_number}", "scene_num": scene_number},
            "pddl_params": {"object_target": goal.object_target,
                            "parent_target": goal.parent_target,
                            "toggle_target": goal.toggle_target, "mrecep_target": "",
                            "object_sliced": False},
            "turk_annotations": {"anns": [{"task_desc": sentence}]},
        },
        "game": {"pddl_domain": package_text("data/alfred.pddl"), "grammar": grammar,
                 "pddl_problem": problem, "solvable": True, "walkthrough": walkthrough},
    }
