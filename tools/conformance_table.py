"""Print moxlite's conformance table (``moxlite.conformance.ROWS``) as markdown.

    python tools/conformance_table.py            # every API
    python tools/conformance_table.py mox.file   # one API

One section per API: a line of counts (same / different / refused), then one row per
documented name. The README's table is this output; tests check the rows against the code.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moxlite import conformance  # noqa: E402  (after the path fix, so the checkout's package is used)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(rows):
    """The markdown text of ``rows``, grouped by API in their order."""
    lines = []
    totals = conformance.counts(rows)
    for api, numbers in totals.items():
        counted = ", ".join(f"{numbers[status]} {status}" for status in conformance.STATUSES)
        lines += [f"### `{api}`", "", f"{sum(numbers.values())} rows: {counted}.", "",
                  "| Name | Kind | Status | Note |", "| --- | --- | --- | --- |"]
        for row in rows:
            if row.api == api:
                lines.append(f"| `{_cell(row.name)}` | {row.kind} | {row.status} | {_cell(row.note)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("api", nargs="*", help="only these APIs (e.g. mox.file); all by default")
    arguments = parser.parse_args(argv)
    rows = [row for row in conformance.ROWS if not arguments.api or row.api in arguments.api]
    if not rows:
        parser.error(f"no rows for {arguments.api}; known: {sorted({row.api for row in conformance.ROWS})}")
    print(markdown(rows))


if __name__ == "__main__":
    main()
