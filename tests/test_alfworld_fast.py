"""The fast ALFWorld engine on its own (no alfworld needed): texts, rules, naming, goals, errors.

The expected strings below were produced by the real engine (TextWorld 1.7.0 + Fast Downward
20.6.4 + alfworld 0.4.2's AlfredDemangler) on the same hand-written game; the differential
test (tests/test_alfworld_fast_equivalence.py) compares the two engines directly.
"""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym_budget.envs.alfworld.engine import CloneableAlfredEngine, EngineStep, make_engine
from agentgym_budget.envs.alfworld.fast import FastAlfredEngine, UnsupportedGameError, compile_world
from agentgym_budget.envs.alfworld.fast.pddl import GoalChecker, PddlSyntaxError, SetFacts, parse_problem
from agentgym_budget.envs.alfworld.fast.text import listing
from agentgym_budget.envs.alfworld.fast.world import demangle
from agentgym_budget.envs.alfworld.game import AlfredGame

GOLDEN = Path(__file__).parent / "data" / "alfworld_fast_golden.json.gz"


def _m(text: str) -> str:
    table = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
    return "".join(table.get(c, c) for c in text)


APPLE1, APPLE2 = "Apple|+00.10|+00.90|-01.00", "Apple|-00.20|+00.90|-01.00"
EGG, MUG, KNIFE = "Egg|+01.00|+00.50|+02.00", "Mug|+00.30|+00.90|-00.50", "Knife|+00.50|+00.90|-00.50"
LAMP, CLOCK, PEN = "DeskLamp|+02.00|+00.80|+01.00", "AlarmClock|+02.10|+00.80|+01.00", "Pen|+02.10|+00.80|+01.10"
CAB1, CAB2 = "Cabinet|+00.68|+00.50|-02.20", "Cabinet|-00.68|+00.50|-02.20"
TOP1, TOP2, COFFEE = "CounterTop|+00.69|+00.95|-02.48", "CounterTop|-01.00|+00.95|-02.48", "CoffeeMachine|-01.00|+00.95|-02.40"
FRIDGE, MICRO, SINK = "Fridge|+01.00|+00.00|+02.00", "Microwave|+01.50|+01.00|-02.00", "Sink|+00.00|+00.90|-01.50|SinkBasin"
TABLE, DESK = "DiningTable|+00.00|+00.00|+00.00", "Desk|+02.00|+00.00|+01.00"
OBJECTS = {APPLE1: "Apple", APPLE2: "Apple", EGG: "Egg", MUG: "Mug", KNIFE: "Knife", LAMP: "DeskLamp", CLOCK: "AlarmClock", PEN: "Pen"}
RECEPTACLES = {  # id -> (type, location); countertop 2 and the coffee machine share a location
    CAB1: ("Cabinet", "loc|1|2|3|30"), CAB2: ("Cabinet", "loc|2|2|3|30"), TOP1: ("CounterTop", "loc|3|2|3|30"),
    TOP2: ("CounterTop", "loc|4|2|3|30"), COFFEE: ("CoffeeMachine", "loc|4|2|3|30"), FRIDGE: ("Fridge", "loc|5|2|3|30"),
    MICRO: ("Microwave", "loc|6|2|3|30"), SINK: ("SinkBasin", "loc|7|2|3|30"), TABLE: ("DiningTable", "loc|8|2|3|30"),
    DESK: ("Desk", "loc|9|2|3|30"),
}
PLACES = {APPLE1: TOP1, APPLE2: FRIDGE, EGG: FRIDGE, MUG: CAB1, KNIFE: TOP2, LAMP: DESK, CLOCK: DESK, PEN: DESK}
CAN_CONTAIN = {
    "Cabinet": "Apple Egg Mug Knife Pen AlarmClock", "CounterTop": "Apple Egg Mug Knife Pen AlarmClock",
    "CoffeeMachine": "Mug", "Fridge": "Apple Egg Mug", "Microwave": "Apple Egg Mug", "SinkBasin": "Apple Egg Mug Knife",
    "DiningTable": "Apple Egg Mug Knife Pen AlarmClock", "Desk": "Pen AlarmClock Mug DeskLamp",
}
PICK_TWO_APPLES = (
    "(and (exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 AppleType) (receptacleType ?r DiningTableType) "
    "(inReceptacle ?o1 ?r) (exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 AppleType) "
    "(receptacleType ?r DiningTableType) (inReceptacle ?o2 ?r)))))))"
)


def kitchen_problem(goal: str = PICK_TWO_APPLES, extra_init: tuple[str, ...] = (), agent_at: str = "loc|0|0|0|0") -> str:
    """The hand-written kitchen the expected texts were recorded on (same ids, same facts)."""
    init = [f"(atLocation agent1 {_m(agent_at)})"]
    init += [f"(objectType {_m(o)} {t}Type)" for o, t in OBJECTS.items()]
    for r, (t, loc) in RECEPTACLES.items():
        init += [f"(receptacleType {_m(r)} {t}Type)", f"(receptacleAtLocation {_m(r)} {_m(loc)})"]
    init += [f"(pickupable {_m(o)})" for o in OBJECTS if o != LAMP]
    init += [f"(openable {_m(r)})" for r, (t, _) in RECEPTACLES.items() if t in ("Cabinet", "Fridge", "Microwave")]
    init += [f"(isReceptacleObject {_m(MUG)})"]
    for o, t in OBJECTS.items():
        if t in ("Apple", "Egg", "Mug"):
            init += [f"(heatable {_m(o)})", f"(coolable {_m(o)})"]
        if t in ("Apple", "Egg", "Mug", "Knife"):
            init += [f"(cleanable {_m(o)})"]
        if t == "Apple":
            init += [f"(sliceable {_m(o)})"]
        if t == "DeskLamp":
            init += [f"(toggleable {_m(o)})"]
    init += [f"(canContain {r}Type {o}Type)" for r, objects in CAN_CONTAIN.items() for o in objects.split()]
    init += [f"(inReceptacle {_m(o)} {_m(r)})" for o, r in PLACES.items()]
    init += list(extra_init)
    locations = sorted({loc for _, loc in RECEPTACLES.values()} | {agent_at})
    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in sorted(set(OBJECTS.values()))]
    objects += [f"{t}Type - rtype" for t in sorted({t for t, _ in RECEPTACLES.values()})]
    objects += [f"{_m(o)} - object" for o in OBJECTS] + [f"{_m(r)} - receptacle" for r in RECEPTACLES]
    objects += [f"{_m(loc)} - location" for loc in locations]
    return "(define (problem kitchen)\n(:domain alfred)\n(:objects\n%s\n)\n(:init\n%s\n)\n(:goal %s)\n)" % (
        "\n".join(objects), "\n".join(init), goal)


def kitchen_game(task_type: str = "pick_two_obj_and_place", goal_sentence: str = "put two apple in diningtable", **kwargs) -> AlfredGame:
    return AlfredGame(id="kitchen", split="test", task_type=task_type, goal=goal_sentence,
                      pddl_problem=kitchen_problem(**kwargs), object_target="apple", parent_target="diningtable")


def play(engine: FastAlfredEngine, *commands: str) -> EngineStep:
    step = None
    for command in commands:
        step = engine.step(command)
    assert step is not None
    return step


@pytest.fixture()
def engine() -> FastAlfredEngine:
    engine = FastAlfredEngine()
    engine.reset(kitchen_game())
    return engine


def test_intro_and_first_admissible_commands_match_the_real_engine():
    step = FastAlfredEngine().reset(kitchen_game())
    assert step.observation == (
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
        "a cabinet 2, a cabinet 1, a coffeemachine 1, a countertop 2, a countertop 1, a desk 1, a diningtable 1, "
        "a fridge 1, a microwave 1, and a sinkbasin 1.\n\nYour task is to: put two apple in diningtable."
    )
    assert step.admissible_commands == [
        "go to cabinet 1", "go to cabinet 2", "go to coffeemachine 1", "go to countertop 1", "go to countertop 2",
        "go to desk 1", "go to diningtable 1", "go to fridge 1", "go to microwave 1", "go to sinkbasin 1",
        "help", "inventory", "look",
    ]
    assert step.won is False


def test_transcript_recorded_on_the_real_engine(engine):
    expected = [
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a apple 2, and a egg 1."),
        ("examine egg 1", "Nothing happens."),  # examine <object> only for the held object
        ("take apple 2 from fridge 1", "You pick up the apple 2 from the fridge 1."),
        ("examine apple 2", "There's nothing special about apple 2."),
        ("look", "You are facing the fridge 1. Next to it, you see nothing."),
        ("inventory", "You are carrying: a apple 2."),
        ("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see a knife 1."),
        ("look", "You are facing the coffeemachine 1, and countertop 2. Next to it, you see nothing."),
        ("go to coffeemachine 1", "Nothing happens."),  # same location: Fast Downward drops the no-op operator
    ]
    for command, observation in expected:
        assert engine.step(command).observation == observation, command
    assert engine.admissible_commands == [
        "examine apple 2", "examine coffeemachine 1", "examine countertop 2", "go to cabinet 1", "go to cabinet 2",
        "go to countertop 1", "go to desk 1", "go to diningtable 1", "go to fridge 1", "go to microwave 1",
        "go to sinkbasin 1", "help", "inventory", "look", "move apple 2 to countertop 2",
    ]


def test_second_transcript_recorded_on_the_real_engine(engine):
    expected = [
        ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
        ("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see a mug 1."),
        ("take mug 1 from cabinet 1", "You pick up the mug 1 from the cabinet 1."),
        ("examine mug 1", "This is a normal mug 1. In it, you see nothing."),
        ("heat mug 1 with microwave 1", "Nothing happens."),
        ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."),
        ("heat mug 1 with microwave 1", "You heat the mug 1 using the microwave 1."),  # closed microwave: fine
        ("examine mug 1", "This is a normal mug 1. In it, you see nothing."),
        ("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see a knife 1."),
        ("move mug 1 to coffeemachine 1", "You move the mug 1 to the coffeemachine 1."),
        ("look", "You are facing the coffeemachine 1, and countertop 2. Next to it, you see nothing."),
        ("take mug 1 from coffeemachine 1", "You pick up the mug 1 from the coffeemachine 1."),
        ("move mug 1 to countertop 2", "You move the mug 1 to the countertop 2."),
        # TextWorld now holds not_inreceptacle(mug, coffeemachine) and objectatlocation(mug, here)
        ("look", "You are facing the coffeemachine 1, and countertop 2. Next to it, you see a mug 1."),
        ("examine countertop 2", "On the countertop 2, you see a knife 1, and a mug 1."),
        ("examine coffeemachine 1", "On the coffeemachine 1, you see nothing."),
        ("take knife 1 from countertop 2", "You pick up the knife 1 from the countertop 2."),
        ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1."),
        ("slice apple 1 with knife 1", "Nothing happens."),  # no objectAtLocation fact for apple 1 yet
        ("move knife 1 to countertop 1", "You move the knife 1 to the countertop 1."),
        ("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1."),
        ("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."),
        ("clean apple 1 with sinkbasin 1", "You clean the apple 1 using the sinkbasin 1."),
        ("examine apple 1", "This is a clean apple 1."),
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ("cool apple 1 with fridge 1", "You cool the apple 1 using the fridge 1."),
        ("examine apple 1", "This is a cool and clean apple 1."),
        ("go to desk 1", "You arrive at desk 1. On the desk 1, you see a alarmclock 1, a desklamp 1, and a pen 1."),
        ("use desklamp 1", "You turn on the desklamp 1."),
        ("use desklamp 1", "You turn on the desklamp 1."),  # toggleObject.feedback: isToggled stays true
        ("examine desk 1", "On the desk 1, you see a alarmclock 1, a desklamp 1, and a pen 1."),
    ]
    for command, observation in expected:
        assert engine.step(command).observation == observation, command
    help_text = engine.step("help").observation
    assert help_text.startswith("Available commands:\n  look:") and help_text.endswith("sharp object\n")


def test_invalid_commands_change_nothing_and_whitespace_is_stripped(engine):
    before = engine.admissible_commands
    for command in ("Go to fridge 1", "go to fridge 1.", "go  to fridge 1", "", "dance", "put apple 1 in fridge 1"):
        step = engine.step(command)
        assert step.observation == "Nothing happens."
        assert step.admissible_commands == before and step.won is False
    assert engine.step("  \tgo to fridge 1 \n").observation.startswith("You arrive at fridge 1.")


def test_pick_two_goal_counts_two_distinct_apples(engine):
    steps = ["go to fridge 1", "open fridge 1", "take apple 2 from fridge 1", "go to diningtable 1", "move apple 2 to diningtable 1"]
    assert play(engine, *steps).won is False
    won = play(engine, "go to countertop 1", "take apple 1 from countertop 1", "go to diningtable 1", "move apple 1 to diningtable 1")
    assert won.observation == "You move the apple 1 to the diningtable 1." and won.won is True
    assert play(engine, "take apple 1 from diningtable 1").won is False  # the engine keeps playing after a win


@pytest.mark.parametrize(
    ("goal", "commands"),
    [
        ("(exists (?r - receptacle ?o - object) (and (inReceptacle ?o ?r) (objectType ?o EggType) (receptacleType ?r MicrowaveType)))",
         ["go to fridge 1", "open fridge 1", "take egg 1 from fridge 1", "go to microwave 1", "open microwave 1", "move egg 1 to microwave 1"]),
        ("(exists (?r - receptacle ?o - object) (and (cleanable ?o) (objectType ?o EggType) (receptacleType ?r CounterTopType) (isClean ?o) (inReceptacle ?o ?r)))",
         ["go to fridge 1", "open fridge 1", "take egg 1 from fridge 1", "go to sinkbasin 1", "clean egg 1 with sinkbasin 1", "go to countertop 1", "move egg 1 to countertop 1"]),
        ("(exists (?r - receptacle ?o - object) (and (heatable ?o) (objectType ?o EggType) (receptacleType ?r CounterTopType) (isHot ?o) (inReceptacle ?o ?r)))",
         ["go to fridge 1", "open fridge 1", "take egg 1 from fridge 1", "go to microwave 1", "heat egg 1 with microwave 1", "go to countertop 1", "move egg 1 to countertop 1"]),
        ("(exists (?r - receptacle ?o - object) (and (coolable ?o) (objectType ?o AppleType) (receptacleType ?r CounterTopType) (isCool ?o) (inReceptacle ?o ?r)))",
         ["go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "cool apple 1 with fridge 1", "go to countertop 1", "move apple 1 to countertop 1"]),
        ("(and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?ot DeskLampType) (toggleable ?ot) (isToggled ?ot) "
         "(receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r))) (exists (?o - object ?a - agent) (and (objectType ?o AlarmClockType) (holds ?a ?o))))",
         ["go to desk 1", "take alarmclock 1 from desk 1", "use desklamp 1"]),
    ],
    ids=["simple", "clean", "heat", "cool", "light"],
)
def test_goals_of_each_task_type_hold_exactly_at_the_last_step(goal, commands):
    engine = FastAlfredEngine()
    assert engine.reset(kitchen_game(goal=goal)).won is False
    for index, command in enumerate(commands):
        step = engine.step(command)
        assert step.observation != "Nothing happens.", command
        assert step.won is (index == len(commands) - 1), command


def test_heat_then_cool_clears_hot():
    goal = "(exists (?o - object) (and (objectType ?o AppleType) (isHot ?o)))"
    engine = FastAlfredEngine()
    engine.reset(kitchen_game(goal=goal))
    assert play(engine, "go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1", "heat apple 1 with microwave 1").won
    assert play(engine, "examine apple 1").observation == "This is a hot apple 1."
    assert not play(engine, "go to fridge 1", "cool apple 1 with fridge 1").won
    assert play(engine, "examine apple 1").observation == "This is a cold apple 1."


def test_slice_needs_an_object_at_the_location_and_a_held_knife():
    extra = (f"(objectAtLocation {_m(APPLE1)} {_m('loc|3|2|3|30')})",)
    engine = FastAlfredEngine()
    engine.reset(kitchen_game(extra_init=extra))
    play(engine, "go to countertop 2", "take knife 1 from countertop 2", "go to countertop 1")
    assert "slice apple 1 with knife 1" in engine.admissible_commands
    assert play(engine, "slice apple 1 with knife 1").observation == "You sliced the apple 1 with the knife 1."


def test_agent_starting_next_to_receptacles_faces_them():
    step = FastAlfredEngine().reset(kitchen_game(agent_at="loc|4|2|3|30"))
    assert "You are facing the coffeemachine 1, and countertop 2. Next to it, you see nothing." in step.observation
    assert "go to countertop 2" not in step.admissible_commands and "examine countertop 2" in step.admissible_commands


UNREACHABLE_GOAL = (  # canContain(CoffeeMachineType, AppleType) is false in the kitchen
    "(exists (?r - receptacle ?o - object) (and (inReceptacle ?o ?r) (objectType ?o AppleType) (receptacleType ?r CoffeeMachineType)))"
)


def test_a_game_with_an_unreachable_goal_is_played_never_won():
    """Deliberate difference (docs/alfworld-fast.md): the real engine raises KeyError('val1') at
    load on such games (Fast Downward's translator proves the goal unreachable); the fast
    engine plays them and the goal never holds."""
    engine = FastAlfredEngine()
    step = engine.reset(kitchen_game(task_type="pick_and_place_simple", goal_sentence="put a apple in coffeemachine", goal=UNREACHABLE_GOAL))
    assert step.won is False and step.observation.endswith("Your task is to: put a apple in coffeemachine.")
    step = play(engine, "go to countertop 1", "take apple 1 from countertop 1", "go to countertop 2")
    assert step.won is False and "move apple 1 to coffeemachine 1" not in step.admissible_commands


def test_clone_is_independent(engine):
    play(engine, "go to fridge 1", "open fridge 1")
    twin = engine.clone()
    assert isinstance(engine, CloneableAlfredEngine)
    twin.step("take apple 2 from fridge 1")
    assert "take apple 2 from fridge 1" in engine.admissible_commands
    assert engine.step("examine fridge 1").observation.endswith("you see a apple 2, and a egg 1.")
    assert twin.step("examine fridge 1").observation.endswith("you see a egg 1.")


def test_memoised_texts_and_commands_are_never_stale_across_clones_and_resets():
    """Random walks on several engines that share their memo (clones, resets of one game) give at
    every step exactly what a shadow engine computing everything afresh gives."""
    from agentgym_budget.envs.alfworld.game import load_games

    rng = random.Random(0)
    for game in load_games("valid_seen")[:4]:
        pairs = [(FastAlfredEngine(), FastAlfredEngine()) for _ in range(2)]  # (engine, its shadow)
        for engine, shadow in pairs:
            assert engine.reset(game) == shadow.reset(game)
        changes = 0
        for _ in range(300):
            engine, shadow = rng.choice(pairs)
            if rng.random() < 0.05:
                assert engine.reset(game) == shadow.reset(game)
            elif rng.random() < 0.1 and len(pairs) < 8:
                pairs.append((engine.clone(), shadow.clone()))
            commands = engine.admissible_commands
            changing = [c for c in commands if c.split()[0] in ("take", "move", "open", "close")]
            command = rng.choice(changing if changing and rng.random() < 0.3 else commands)
            changes += command in changing
            shadow._memo = {}  # nothing remembered: computed from its state
            assert engine.step(command) == shadow.step(command), command
        assert changes >= 30


def test_make_engine_builds_the_fast_engine():
    assert isinstance(make_engine("fast"), FastAlfredEngine)


def test_step_before_reset_is_an_error():
    with pytest.raises(RuntimeError, match="before reset"):
        FastAlfredEngine().step("look")


def test_demangler_numbering():
    names = demangle(["countertop_bar__plus_00", "countertop_bar__minus_01", "sink_bar__plus_00_bar_sinkbasin", "agent1"])
    # the alphabetically first id gets the highest number; "basin" ids get the suffix
    assert names == {"agent1": "agent1 ", "countertop_bar__minus_01": "countertop 2", "countertop_bar__plus_00": "countertop 1",
                     "sink_bar__plus_00_bar_sinkbasin": "sinkbasin 1"}


def test_listing_uses_the_oxford_comma_even_for_two():
    assert [listing([]), listing(["a x"]), listing(["a x", "a y"]), listing(["a x", "a y", "a z"])] == [
        "nothing", "a x", "a x, and a y", "a x, a y, and a z"]


def test_reset_accepts_a_game_file_and_a_dict(tmp_path):
    game = kitchen_game()
    path = tmp_path / "game.tw-pddl"
    path.write_text(json.dumps(game.to_tw_pddl()))
    expected = FastAlfredEngine().reset(game)
    assert FastAlfredEngine().reset(str(path)) == expected
    assert FastAlfredEngine().reset(game.to_tw_pddl()) == expected


def test_other_grammars_and_domains_are_refused():
    game = kitchen_game().to_tw_pddl()
    old_grammar = game["grammar"].replace("move {o} to {r}", "put {o} in/on {r}")
    with pytest.raises(UnsupportedGameError, match="grammar"):
        FastAlfredEngine().reset({**game, "grammar": old_grammar})
    with pytest.raises(UnsupportedGameError, match="domain"):
        FastAlfredEngine().reset({**game, "pddl_domain": game["pddl_domain"].replace("(:action help", "(:action help2")})
    with pytest.raises(TypeError, match="AlfredGame"):
        FastAlfredEngine().reset(42)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.replace("agent1 - agent", "agent1 - agent\nagent2 - agent"), "exactly one agent"),
        (lambda p: p.replace(f"(atLocation agent1 {_m('loc|0|0|0|0')})", ""), "exactly one location"),
        (lambda p: p.replace("(:init", f"(:init\n(receptacleAtLocation {_m(CAB1)} {_m('loc|9|2|3|30')})"), "two locations"),
        (lambda p: p.replace("(:init", "(:init\n(flying agent1)"), "does not declare"),
        (lambda p: p.replace("(:init", f"(:init\n(opened {_m(APPLE1)})"), "not a receptacle"),
    ],
    ids=["two-agents", "no-agent-location", "receptacle-twice", "unknown-predicate", "wrong-type"],
)
def test_unsupported_problems_are_refused_with_a_reason(change, message):
    with pytest.raises(UnsupportedGameError, match=message):
        compile_world(change(kitchen_problem()), "task")


def test_pddl_reader_errors_and_goal_checker():
    with pytest.raises(PddlSyntaxError, match="unbalanced"):
        parse_problem("(define (problem p) (:domain alfred)")
    with pytest.raises(PddlSyntaxError, match="duplicate object"):
        parse_problem("(define (problem p) (:objects a a - object) (:init) (:goal (and)))")
    problem = parse_problem(
        "(define (problem p) (:objects x y - object r - receptacle) (:init (inReceptacle x r) (isHot y) (= (distance x y) 3))"
        " (:goal (and (forall (?o - object) (imply (isHot ?o) (not (inReceptacle ?o r)))) (or (inReceptacle y r) (isHot y)))))"
    )
    assert problem.init == frozenset({("inreceptacle", "x", "r"), ("ishot", "y")})
    assert GoalChecker(problem.goal, problem.types).holds(SetFacts(problem.init)) is True
    assert GoalChecker(problem.goal, problem.types).holds(SetFacts(problem.init | {("inreceptacle", "y", "r")})) is False


def test_fast_engine_imports_neither_textworld_nor_alfworld():
    code = (
        "import sys, random\n"
        "from agentgym_budget.envs.alfworld.fast import FastAlfredEngine\n"
        "from tools.alfworld.fuzz import fuzz_game\n"
        "FastAlfredEngine().reset(fuzz_game(random.Random(0)))\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textworld', 'alfworld', 'fast_downward')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


@pytest.mark.skipif(not GOLDEN.exists(), reason="golden transcripts not generated (benchmarks/alfworld_equivalence.py --golden)")
def test_golden_transcripts_recorded_on_the_real_engine():
    """Replays episodes recorded on the real engine (random edge-case games); needs no alfworld."""
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as handle:
        episodes = json.load(handle)
    assert episodes
    engine = FastAlfredEngine()
    compared = 0
    for episode in episodes:
        game = AlfredGame.from_record(episode["game"])
        for index, (command, observation, admissible, won) in enumerate(episode["transcript"]):
            step = engine.reset(game) if command is None else engine.step(command)
            assert (step.observation, step.admissible_commands, step.won) == (observation, admissible, won), (game.id, index, command)
            compared += 1
    assert compared >= 100
