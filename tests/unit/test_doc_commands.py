"""Every ``dialogue-judge …`` command in README.md and docs/*.md parses with the real CLI (issue 14, finding 2).

Commands are taken from code blocks (fenced or indented; ``\\`` continuations joined, a ``$`` prompt, a path such as
``.venv/bin/`` or a ``docker compose run --rm api`` prefix allowed, shell comments and ``&`` dropped) and from inline
code spans that start with ``dialogue-judge`` (a span of command words only, such as ``dialogue-judge submit``
in prose, names the command: it must exist). Each is parsed by click exactly as the CLI would parse it (every
group, option, argument count and type), without running the command. An inline list of alternatives
(``up | demo | api``, ``runs [delete|prune]``, ``keys create … | list | revoke``) names commands: each alternative must
exist (checked by parsing it with ``--help``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

try:  # typer vendors click from 0.2x on; before, it used click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer
    from click import exceptions as click_errors  # type: ignore[no-redef]

from dialogue_judge.cli import app
from judge_simulator.__main__ import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_STOP = {"&", "&&", "|", "||", ";", ">", ">>", "2>", "<"}
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`]+)`")


def _is_cli(token: str) -> bool:
    return token == "dialogue-judge" or token.endswith("/dialogue-judge")


def _argv(tokens: list[str]) -> list[str] | None:
    """The arguments after the ``dialogue-judge`` token, up to a shell operator; None when it is not a command."""
    for index, token in enumerate(tokens):
        if _is_cli(token):
            before = tokens[:index]
            if before and before not in (["$"], ["docker", "compose", "run", "--rm", "api"]):
                return None
            args = []
            for arg in tokens[index + 1 :]:
                if arg in SHELL_STOP:
                    break
                args.append(arg)
            return args
    return None


def _code_lines(text: str) -> list[str]:
    """Logical lines of the fenced and indented code blocks (continuations joined)."""
    lines: list[str] = []
    blocks = [block.split("\n")[1:-1] for block in FENCE.findall(text)]
    prose = FENCE.sub("", text)
    blocks += [
        [line for line in prose.split("\n") if line.startswith("    ") and not line.lstrip().startswith(("-", "*"))]
    ]
    for block in blocks:
        pending = ""
        for line in block:
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            lines.append(pending + line)
            pending = ""
    return lines


def doc_commands() -> list[tuple[str, list[str], bool]]:
    """(where, argv, full): full = parse it whole; else only check the named command exists."""
    found: list[tuple[str, list[str], bool]] = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO).as_posix()
        for line in _code_lines(text):
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError:
                continue
            argv = _argv(tokens)
            if argv is not None:
                found.append((f"{name}: {line.strip()}", argv, True))
        for span in SPAN.findall(FENCE.sub("", text)):
            span = " ".join(span.split())
            if not re.match(r"^(\.venv/bin/)?dialogue-judge ", span):  # a command, not a path or the bare name
                continue
            first, *alternatives = span.split(" | ")
            argv = _argv(shlex.split(first)) or []
            # a span of command words only (`dialogue-judge submit`) names the command: it must exist
            found.append((f"{name}: `{span}`", argv, _command_path(argv) != argv))
            # an alternative replaces the last command word of the first part (``up | demo``, ``keys create | list``)
            parent = _command_path(argv)[:-1]
            for alternative in alternatives:
                words = [w for w in alternative.split() if not w.startswith("[")]
                choices = re.findall(r"\[([^\]]+)\]", alternative)
                if not words:
                    continue
                found.append((f"{name}: `{span}` ({alternative})", [*parent, words[0]], False))
                for group in choices:
                    for choice in group.split("|"):
                        found.append((f"{name}: `{span}` ({choice})", [*parent, words[0], choice], False))
    return found


def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def _command_path(argv: list[str]) -> list[str]:
    """The leading words of ``argv`` that name (sub)commands."""
    command: Any = typer.main.get_command(app)
    path: list[str] = []
    for word in argv:
        if not _is_group(command):
            break
        sub = command.commands.get(word)
        if sub is None:
            break
        path.append(word)
        command = sub
    return path


def parse(argv: list[str]) -> None:
    """Parse ``argv`` as the CLI does (groups, options, argument counts and types) without invoking anything."""
    command: Any = typer.main.get_command(app)
    ctx = command.make_context("dialogue-judge", list(argv))
    while _is_group(command):
        protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])
        rest = [*protected, *ctx.args]
        if not rest:
            return
        name, sub, args = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        if name == "simulator":  # its arguments go to the simulator's own argparse parser
            build_parser("dialogue-judge simulator").parse_args(args)
            return
        command = sub
        ctx = command.make_context(name, args, parent=ctx)


COMMANDS = doc_commands()


def test_the_docs_name_commands() -> None:
    assert len(COMMANDS) >= 40
    assert any(argv[:1] == ["agreement"] and "--human-prefix" in argv for _, argv, _ in COMMANDS)


@pytest.mark.parametrize(("where", "argv", "full"), COMMANDS, ids=[c[0][:90] for c in COMMANDS])
def test_doc_command_parses(where: str, argv: list[str], full: bool) -> None:
    try:
        parse(argv if full else [*argv, "--help"])
    except typer.Exit as exc:  # --help
        assert exc.exit_code == 0, where
    except click_errors.ClickException as exc:
        pytest.fail(f"{where}\n  dialogue-judge {shlex.join(argv)}\n  {exc.format_message()}")
    except SystemExit as exc:  # the simulator's argparse parser
        assert exc.code == 0, f"{where}: the simulator's parser rejected {argv}"
