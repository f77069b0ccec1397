"""The observation texts of ALFWorld's grammar (``alfred.twl2`` of alfworld 0.4.2), as code.

TextWorld derives every feedback from the grammar's production rules; this module writes the
same rules as functions.  Each function names the grammar symbol it reproduces.  Facts the
rules read come from the caller; lists follow TextWorld's ``display_list`` and the order of
``State.all_assignments`` (facts sorted by their raw ids).

Example:
    >>> listing([])
    'nothing'
    >>> listing(["a apple 1", "a mug 2"])
    'a apple 1, and a mug 2'
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "HELP_TEXT",
    "INTRO_HEADER",
    "NOTHING_HAPPENS",
    "examine_object_text",
    "listing",
    "look_text",
]

#: ``intro``'s fixed start (before ``#look.feedback#``).
INTRO_HEADER = "-= Welcome to TextWorld, ALFRED! =-\n\n"
#: TextWorld ``PddlEnv.step``'s answer to a command that is not admissible.
NOTHING_HAPPENS = "Nothing happens."
#: ``help.feedback``; the rule's leading newline does not reach the output (the CSG parser
#: drops it), its trailing one does — as observed on the real engine.
HELP_TEXT = (
    "Available commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "  move (object) to (receptacle):  place an object in or on a receptacle\n"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle\n"
    "  slice (object) with (object):     slice an object using a sharp object\n"
)


def listing(items: Sequence[str]) -> str:
    """TextWorld's ``display_list``: ``nothing`` / ``x`` / ``x, y, and z`` (Oxford comma even for two)."""
    if not items:
        return "nothing"  # list_empty
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


def look_text(facing: Sequence[str], next_to: Sequence[str], appliances: Sequence[str]) -> str:
    """``look.feedback``.

    Args:
        facing: names of the receptacles at the agent's location (``look-variations``); when
            empty the second rule applies.
        next_to: ``a <name>`` items of ``list_objects_on_the_floor``.
        appliances: ``a <name>`` items of ``list_appliances`` (second rule only).
    """
    if facing:
        return f"You are facing the {listing(facing)}. Next to it, you see {listing(next_to)}."
    return f"You are in the middle of a room. Looking quickly around you, you see {listing(appliances)}."


def examine_object_text(
    name: str,
    *,
    receptacle_object: bool,
    contents: Sequence[str],
    clean: bool,
    hot: bool,
    cool: bool,
    sliced: bool,
    toggleable: bool,
    toggled: bool,
    sliceable: bool,
) -> str:
    """``examineObject.feedback``: the first rule whose condition holds.

    The rule ``toggleable(o) & not_istoggled(o)`` ("This X is off.") never applies on the real
    engine: TextWorld only holds ``not_*`` facts that an action's effect produced, and no
    action deletes ``isToggled``; so an untoggled lamp falls through to the later rules.
    """
    if receptacle_object:
        return f"This is a normal {name}. In it, you see {listing(contents)}."
    if clean and hot and sliced:
        return f"This is a hot and clean sliced {name}."
    if clean and cool and sliced:
        return f"This is a cool and clean sliced {name}."
    if clean and sliced:
        return f"This is a clean sliced {name}."
    if hot and sliced:
        return f"This is a hot sliced {name}."
    if cool and sliced:
        return f"This is a cool sliced {name}."
    if clean and hot:
        return f"This is a hot and clean {name}."
    if clean and cool:
        return f"This is a cool and clean {name}."
    if hot:
        return f"This is a hot {name}."
    if clean:
        return f"This is a clean {name}."
    if cool:
        return f"This is a cold {name}."
    if toggleable and toggled:
        return f"This {name} is on."
    if sliceable and sliced:
        return f"This is a sliced {name}."
    return f"There's nothing special about {name}."
