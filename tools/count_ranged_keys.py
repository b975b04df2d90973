"""Count the recipe keys that have a declared range, from the declaration itself.

A key has a declared range when its schema field carries ``valid`` (a moxlite.ranges.Range)
or ``choices``, or a rule of its block names it (moxlite.declarations.rules_of); wrapper parameters and schedule arguments
count from moxlite.optimizers.recipe_tables's tables. Written so that it also runs on a tree from
before issue 21 (no ``valid``, no rules, no schedule ranges), to give the "before" figure:

    PYTHONPATH=. python tools/count_ranged_keys.py [--list]
"""

import dataclasses
import sys

from moxlite.optimizers import recipe_tables
from moxlite.recipes import schema

try:
    from moxlite.declarations import rules_of
except ImportError:   # a tree whose rules are the schema's RULES table
    def rules_of(cls):
        return getattr(schema, "RULES", {}).get(cls, ())


def ranged_keys():
    keys, unranged = [], []

    def walk(cls, prefix):
        ruled = {rule.key for rule in rules_of(cls)}
        for field in dataclasses.fields(cls):
            if dataclasses.is_dataclass(field.type):
                walk(field.type, prefix + field.name + ".")
            elif field.metadata.get("rest"):
                continue
            elif field.metadata.get("valid") or field.metadata.get("choices") or field.name in ruled:
                keys.append(prefix + field.name)
            else:
                unranged.append(prefix + field.name)

    walk(schema.Recipe, "")
    keys += [f"optimizer.wrappers[].{name}.{key}" for name, table in recipe_tables.WRAPPER_PARAMETERS.items()
             for key in table]
    if hasattr(recipe_tables, "SCHEDULES"):
        schedules = {kind: schedule.arguments for kind, schedule in recipe_tables.SCHEDULES.items()}
    else:   # a tree whose schedule ranges are SCHEDULE_PARAMETERS (none before issue 21)
        schedules = getattr(recipe_tables, "SCHEDULE_PARAMETERS", {})
    keys += [f"schedule.{kind}.{key}" for kind, table in schedules.items() for key in table]
    return keys, unranged


def main(argv):
    keys, unranged = ranged_keys()
    print(f"{len(keys)} keys with a declared range; {len(unranged)} schema keys without one")
    if "--list" in argv:
        print("without a declared range:")
        for key in unranged:
            print("  " + key)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
