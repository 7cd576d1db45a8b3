"""The options tables of docs/providers.md, made from each provider's typed options (``Options.describe()``):
the page says what ``deskctl providers --json`` says. ``python -m deskctl.providers._docs docs/providers.md``
rewrites every table between its markers; tests/unit/test_provider_options.py fails while one is stale."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["BLOCK", "providers_with_options", "render", "update"]

#: a table's markers: ``<!-- options:NAME -->`` ... ``<!-- /options:NAME -->``
BLOCK = re.compile(r"(<!-- options:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /options:(?P=name) -->)", re.S)


def providers_with_options() -> list[str]:
    """Built-in providers that declare typed options, sorted."""
    from deskctl.providers import PROVIDERS, load_provider_class

    return sorted(name for name in PROVIDERS if load_provider_class(name).options_model is not None)


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|")


def render(name: str) -> str:
    """The Markdown table of the options of the provider ``name``."""
    from deskctl.providers import load_provider_class

    model = load_provider_class(name).options_class()
    rows = model.describe() if model is not None else []
    if not rows:
        return "No options.\n"
    out = ["| option | type | default | environment | what it does |", "|---|---|---|---|---|"]
    for row in rows:
        bounds = [f"{sign} {row[key]}" for key, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
                  if key in row]
        default = "(secret)" if row["secret"] else "required" if row["required"] else f"`{_cell(row['default'])}`"
        what = row["doc"] + (f" ({', '.join(bounds)})" if bounds else "")
        out.append(f"| `{row['name']}` | `{_cell(row['type'])}` | {default} | "
                   f"{'`' + row['env'] + '`' if row['env'] else ''} | {_cell(what)} |")
    return "\n".join(out) + "\n"


def update(text: str) -> str:
    """``text`` with every options table between its markers made anew."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "docs/providers.md")
    before = path.read_text()
    after = update(before)
    if after != before:
        path.write_text(after)
        print(f"{path}: options tables rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
