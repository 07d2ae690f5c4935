"""MkDocs hooks of the documentation site (mkdocs.yml): reference pages generated from the code itself.

A page holding ``<!-- generated: commands -->`` gets every management command with each of its options, read
from the command's own argparse parser; ``<!-- generated: checks -->`` gets every system check id with the
docstring of the check function that reports it (read with ``ast``, nothing imported);
``<!-- generated: settings -->`` every ``KINETIS_QUEUE`` key with its default, from the schemas conf.py
applies. So the reference cannot fall behind the code.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kinetis_queue"
_CHECK_ID = re.compile(r"^kinetis_queue\.[EW]\d{3}$")


def _setup_django() -> None:
    """The demo project's settings (SQLite, no service), unless Django is set up already (under pytest)."""
    import django
    from django.apps import apps

    if apps.ready:
        return

    for path in (str(ROOT), str(ROOT / "testproject")):
        if path not in sys.path:
            sys.path.insert(0, path)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option_row(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs != 0:
            names += f" `{action.metavar or action.dest.upper()}`"
    else:
        names = f"`{action.metavar or action.dest.upper()}`" + (" ..." if action.nargs in ("+", "*") else "")
    default = "" if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{action.default}`"
    choices = f" (one of {', '.join(f'`{c}`' for c in action.choices)})" if action.choices else ""
    return f"| {names} | {default} | {_cell((action.help or '') % vars(action) if action.help else '')}{choices} |"


def commands_markdown() -> str:
    """One section per queue_* command: its help, its usage line and a table of its own options."""
    from django.core.management import BaseCommand, load_command_class

    _setup_django()
    common = {a.dest for a in BaseCommand().create_parser("manage.py", "x")._actions}
    names = sorted(p.stem for p in (PACKAGE / "management" / "commands").glob("queue_*.py"))
    out: list[str] = []
    for name in names:
        command = load_command_class("kinetis_queue", name)
        parser = command.create_parser("manage.py", name)
        own = [a for a in parser._actions if a.dest not in common]
        out += [f"## `{name}`", "", _cell(command.help or ""), "", "```text", parser.format_usage().strip(), "```", ""]
        if own:
            out += ["| option | default | meaning |", "|---|---|---|", *(_option_row(a) for a in own), ""]
        else:
            out += ["No options of its own.", ""]
    return "\n".join(out)


def _message(call: ast.Call) -> str:
    """The message a check reports when the code writes it out (a literal or an f-string), else nothing."""
    if not call.args or not isinstance(call.args[0], ast.Constant | ast.JoinedStr):
        return ""
    text = ast.unparse(call.args[0])
    return text if len(text) <= 100 else text[:97] + "..."


def checks_markdown() -> str:
    """Each check id, where it is reported, the message as the code writes it, and the docstring's summary."""
    found: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            summary = (ast.get_docstring(node) or "").split("\n\n")[0]
            for call in ast.walk(node):
                if not isinstance(call, ast.Call):
                    continue
                for keyword in call.keywords:
                    value = keyword.value
                    if (
                        keyword.arg == "id"
                        and isinstance(value, ast.Constant)
                        and isinstance(value.value, str)
                        and _CHECK_ID.match(value.value)
                    ):
                        found[value.value].add((f"{module}.{node.name}", _message(call), summary))
    rows = ["| id | level | reported by | message (as the code writes it) | the check |", "|---|---|---|---|---|"]
    for check_id in sorted(found):
        level = "Error" if check_id.split(".")[1].startswith("E") else "Warning"
        for where, message, summary in sorted(found[check_id]):
            shown = f"`{_cell(message)}`" if message else ""
            rows.append(f"| `{check_id}` | {level} | `{where}` | {shown} | {_cell(summary)} |")
    return "\n".join(rows) + "\n"


def setting_keys() -> list[tuple[str, str, Any]]:
    """(key, where it goes, default) for every key KINETIS_QUEUE accepts, as conf.py and the schemas declare them."""
    _setup_django()
    from kinetis_queue import conf

    keys: list[tuple[str, str, Any]] = [
        ("DEFAULT_CONNECTION", "top", "default"),
        ("CONNECTIONS", "top", None),
        ("IMPORTS", "top", []),
        ("SCHEDULE", "top", None),
        ("MAIL", "top", None),
        ("ENDPOINTS", "top", None),
        ("MIDDLEWARE", "top", None),
        ("RECORD_EXPIRED", "top", False),
        *((name, "top", default) for name, default in conf.OBSERVABILITY_KEYS.items()),
        *((o.name, "top or connection", o.default) for o in conf.SHARED_OPTIONS),
        ("BACKEND", "connection", None),
    ]
    with_outbox = [b for b in conf.builtin_backends() if b not in conf.NO_OUTBOX]
    keys += [(o.name, f"connection: {', '.join(with_outbox)}", o.default) for o in conf.OUTBOX_OPTIONS]
    for backend in conf.builtin_backends():
        schema = conf.backend_options(backend)
        assert schema is not None, backend
        keys += [(o.name, f"connection: {backend}", o.default) for o in schema.options]
    return keys


def settings_markdown() -> str:
    rows = ["| key | where | default |", "|---|---|---|"]
    for name, where, default in setting_keys():
        rows.append(f"| `{name}` | {where} | {'' if default is None else f'`{default!r}`'} |")
    return "\n".join(rows) + "\n"


GENERATORS = {"commands": commands_markdown, "checks": checks_markdown, "settings": settings_markdown}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for name, generate in GENERATORS.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
