"""The ``dynocell`` command: a Typer root app, its command modules, and error translation.

Each module named in :data:`COMMAND_MODULES` defines ``register(app: typer.Typer) -> None``
and adds its commands (or a sub-app) to the root. :func:`main` runs the app and
translates a :class:`~dynocell.errors.DynocellError` into one ``Error: …`` line
(plus ``hint: …``) on stderr with the error's ``exit_code``; the traceback is
shown only with ``--debug`` (or the ``debug`` setting).

Importing this module must stay cheap: ``dynocell --help`` imports only Typer,
rich and the command modules, never torch, SQLAlchemy or the procedures.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import TYPE_CHECKING, Any, Sequence

import typer

from dynocell.cli.common import err_console, state

if TYPE_CHECKING:  # pragma: no cover
    import click

COMMAND_MODULES: tuple[str, ...] = (
    "dynocell.cli.commands.setup",
    "dynocell.cli.commands.config",
    "dynocell.cli.commands.boots",
    "dynocell.cli.commands.run",
    "dynocell.cli.commands.web",
    "dynocell.cli.commands.runbook",
    "dynocell.cli.commands.fleet",
    "dynocell.cli.commands.engine",
    "dynocell.cli.commands.experiment",
    "dynocell.cli.commands.model",
    "dynocell.cli.commands.plan",
    "dynocell.cli.commands.tui",
    "dynocell.cli.commands.imports",
    "dynocell.cli.commands.attach",
    "dynocell.cli.commands.compare",
)

app = typer.Typer(
    name="dynocell",
    help="dynocell — an engine test cell for LLM serving: boot an engine with one config, "
    "prove it healthy, benchmark it, measure speculative acceptance, profile it, and keep "
    "every run in one store.\n\nExample: dynocell init && dynocell config add examples/tiny.toml",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        from dynocell import __version__

        try:
            installed = version("dynocell")
        except PackageNotFoundError:
            installed = __version__
        typer.echo(f"dynocell {installed}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show the full traceback when a command fails."),
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print dynocell's version and exit."),
    store: str = typer.Option("", "--store", metavar="PATH",
                              help="Read the SQLite store file at PATH instead of the data directory's, read-only: "
                                   "it is never migrated or written (a private migrated copy is read), e.g. "
                                   "dynocell --store tests/data/vllm-0.26.0/dynocell-h200/dynocell.db runs"),
) -> None:
    """Global options (they go before the command: dynocell --debug config add FILE)."""
    if debug:
        state.debug = True
    # One process may run several commands (tests, an embedding program): a read command's read-only
    # (or --store snapshot) cell must not serve the next command's writes, nor one --store the next.
    if (store or None) != state.store_path:
        state.settings = state.cell = None
    elif state.cell is not None and (state.cell.read_only or state.cell.snapshot):
        state.cell = None
    state.store_path = store or None


_registered = False


def build_app() -> typer.Typer:
    """The root app with every module of :data:`COMMAND_MODULES` registered (once)."""
    global _registered
    if not _registered:
        for name in COMMAND_MODULES:
            importlib.import_module(name).register(app)
        _registered = True
    return app


def tidy_help(command: Any) -> Any:
    """Make ``--help`` read as a person would write it, over the whole command tree (in place).

    Typer >= 0.20 prints each parameter's Python type (``<bool>`` beside every flag, ``<str>`` beside an
    argument, ``<list[str]>``, and ``{runs}...`` for a required argument in the usage line). A flag takes no
    value, so it gets no type; an argument is named in capitals (``REF``, ``RUNS...``), bare when required and
    ``[REF]`` when optional, as click's own usage lines and ``git``/``llm`` help do, with no type beside its
    name; an option's value is named by its kind in click's words (``TEXT``, ``INTEGER``, ``FLOAT``, ``PATH``).
    Returns ``command``.
    """
    stack = [command]
    while stack:
        cmd = stack.pop()
        for param in cmd.params:  # Typer vendors its own click: parameters are told apart by their kind name
            _tidy_param(param)
        get_help_option = cmd.get_help_option
        cmd.get_help_option = lambda ctx, _get=get_help_option: _tidy_param(_get(ctx))  # made per context
        stack.extend(getattr(cmd, "commands", {}).values())
    return command


#: Typer's type names (``<str>``, ``<int range>``) as the value words of click's help.
VALUE_WORDS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN", "path": "PATH",
               "Path": "PATH", "file": "FILE", "datetime": "DATETIME", "int range": "INTEGER",
               "float range": "FLOAT", "uuid": "UUID"}


def value_word(typer_type: str | None) -> str | None:
    """``<str>`` → ``TEXT``, ``<list[int]>`` → ``INTEGER``, ``<int range>`` → ``INTEGER`` (the range is printed
    beside it); a choice ``<a|b>`` → ``a|b``; None stays None."""
    if not typer_type:
        return typer_type
    inner = typer_type.removeprefix("<").removesuffix(">")
    while inner.startswith("list[") and inner.endswith("]"):
        inner = inner[5:-1]
    return VALUE_WORDS.get(inner, inner)


def _tidy_param(param: Any) -> Any:
    if param is None or getattr(param, "_tidied", False):
        return param
    param._tidied = True
    if param.param_type_name == "option":
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            param.metavar = ""
        elif param.metavar is None:
            typed = param.display_type_rich
            param.display_type_rich = lambda ctx, _typed=typed: value_word(_typed(ctx))
    elif param.param_type_name == "argument" and param.name:
        if param.metavar is None:
            param.metavar = param.name.upper() + ("..." if param.nargs != 1 else "")
        elif param.nargs != 1 and not param.metavar.endswith("..."):
            param.metavar += "..."
        param.display_type_rich = lambda ctx: None  # the name says it: no <str> beside REF
        param._usage_display_name = lambda _p=param: _p.metavar if _p.required else f"[{_p.metavar}]"
    return param


def _error_width() -> int | None:
    """Columns to wrap ``Error:``/``hint:`` lines at: the terminal's width (or ``COLUMNS``); None (one line
    each) when stderr is piped and ``COLUMNS`` is unset, so a log or ``grep`` gets the whole message on its
    line."""
    from dynocell.settings import terminal_columns

    return terminal_columns() or (err_console.size.width if err_console.is_terminal else None)


#: What every line of an ``Error:``/``hint:`` message after its first starts with: a continuation can never be read
#: as a line of its own (a newline, or a wrap, inside a quoted file name cannot forge a ``hint:`` line).
CONTINUATION = "  "


def error_lines(text: str, width: int | None) -> list[str]:
    """``text`` (an ``Error: …`` or ``hint: …`` message) as the lines the CLI prints: made
    :func:`~dynocell.text.printable` (newlines kept), wrapped at ``width`` columns at word boundaries with
    :func:`~dynocell.text.wrap_keeping_commands` (a `backticked command` never split, a word longer than a line
    alone on its line, whole; None: not wrapped), every line after the first indented by :data:`CONTINUATION`."""
    from dynocell.text import printable, wrap_keeping_commands  # a message may quote a file name or a log line

    out: list[str] = []
    for i, line in enumerate(printable(text, keep_newlines=True).split("\n")):
        first = "" if i == 0 else CONTINUATION
        if width is None:
            out.append(first + line)
            continue
        wrapped = wrap_keeping_commands(line, width - len(CONTINUATION)).split("\n")
        out.extend((first if j == 0 else CONTINUATION) + w for j, w in enumerate(wrapped))
    return out


def _say_error(text: str) -> None:
    for line in error_lines(text, _error_width()):
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _report(exc: BaseException, code: int, message: str, hint: str | None = None) -> int:
    if state.debug:
        traceback.print_exception(exc, file=sys.stderr)
    _say_error(f"Error: {message}")
    if hint:
        _say_error(f"hint: {hint}")
    return code


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit code. The cell's notes (how the
    store was opened: :attr:`~dynocell.runbooks.cell.Cell.notes`) are printed on stderr last, ``note: …``."""
    args = list(sys.argv[1:] if argv is None else argv)
    # --debug is accepted anywhere before "--" (dynocell config add F --debug too): take it out here.
    end = args.index("--") if "--" in args else len(args)
    if "--debug" in args[:end]:
        state.debug = True
        args = [a for a in args[:end] if a != "--debug"] + args[end:]
    command = tidy_help(typer.main.get_command(build_app()))
    try:
        return _run_command(command, args)
    finally:
        for note in (state.cell.notes if state.cell is not None else ()):
            _say_error(f"note: {note}")


def usage_error_lines(exc: Any) -> list[str]:
    """A usage error of Typer/click (a missing argument, an unknown option, a bad value) as the two messages
    every other error prints: ``Error: …`` and ``hint: …`` naming the usage line and ``-h``, in place of
    Typer's boxed panel."""
    ctx = getattr(exc, "ctx", None)
    lines = [f"Error: {exc.format_message()}"]
    if ctx is not None:
        usage = " ".join(ctx.get_usage().split()).removeprefix("Usage: ")
        lines.append(f"hint: usage: {usage} (`{ctx.command_path} -h` for help)")
    return lines


def _say_usage_error(exc: Any) -> None:
    if type(exc).__name__ == "NoArgsIsHelpError":  # its help is already printed
        return
    for line in usage_error_lines(exc):
        _say_error(line)


def _run_command(command: click.Command, args: list[str]) -> int:
    from typer import rich_utils

    from dynocell.errors import DynocellError

    # Typer prints a usage error as a boxed panel through rich_utils.rich_format_error: dynocell prints it as
    # the one-line Error:/hint: pair of every other error (issue 39), wrapped like them.
    boxed = rich_utils.rich_format_error
    setattr(rich_utils, "rich_format_error", _say_usage_error)  # noqa: B010 - typer's own click type, not ours
    try:
        # Standalone mode: Typer/click report usage errors themselves (exit 2) and exit via SystemExit.
        command.main(args=args, prog_name="dynocell", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        err_console.print(str(code), markup=False, highlight=False)
        return 1
    except DynocellError as exc:
        return _report(exc, exc.exit_code, exc.message, exc.hint)
    except KeyboardInterrupt as exc:
        return _report(exc, 130, "interrupted")
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug, not a user error: say so, keep the traceback reachable
        if state.debug:
            traceback.print_exception(exc, file=sys.stderr)
            return 1
        return _report(exc, 1, f"internal error: {type(exc).__name__}: {exc}",
                       "run again with --debug for the traceback, and report it")
    finally:
        rich_utils.rich_format_error = boxed
    return 0


def main() -> None:
    """Console-script entry point (``dynocell``) and ``python -m dynocell``."""
    sys.exit(run())
