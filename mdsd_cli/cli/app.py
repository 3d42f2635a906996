"""The ``mdsd`` Typer application.

Commands live in one module per group; this module wires them up and turns
library errors into ``Error: <message>`` on stderr with exit code 1 (usage
errors exit with 2, as click does); Ctrl-C into one line and exit code 130.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from ..errors import MdsdError
from . import audit as audit_commands
from . import bench as bench_commands
from . import bound as bound_commands
from . import datasets as dataset_commands
from . import decode as decode_commands
from . import design as design_commands
from . import sweep as sweep_commands
from . import verify as verify_commands
from .console import err_console

# click's UsageError, whether typer vendors click or depends on it.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class MdsdGroup(TyperGroup):
    """Top-level group: library errors become one clean line, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MdsdError as exc:
            err_console().print(f"Error: {exc.cli_message()}", markup=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:  # commands with work to keep (sweep, dump, audit) say so themselves
            err_console().print("Interrupted: no output file was written or changed (mdsd writes its files "
                                "only when a run completes).", markup=False)
            raise typer.Exit(130) from None
        except MemoryError:  # an estimate missed, or a limit the checks could not see
            err_console().print("Error: out of memory; use fewer pairs, a smaller vocabulary or tree, or fewer "
                                "--jobs (the memory checks refuse what they can foresee; see docs/reliability.md)",
                                markup=False)
            raise typer.Exit(1) from None
        except UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `mdsd`: the help text
                exc.show()
            else:  # one line, like every other error
                message = " ".join(exc.format_message().split())
                command = exc.ctx.command_path if exc.ctx is not None else "mdsd"
                err_console().print(f"Error: {message} (see '{command} --help')", markup=False)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=MdsdGroup,
    name="mdsd",
    help="Multi-draft speculative decoding: optimal acceptance rates (α*), draft samplers and verifiers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"mdsd {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version and exit."),
) -> None:
    """Multi-draft speculative decoding: optimal acceptance rates (α*), draft samplers and verifiers.

    Data goes to stdout, progress and messages to stderr.
    """


#: The commands by help panel, in the order --help lists them.
COMMANDS = {
    "Bounds": {"bound": bound_commands.bound, "design": design_commands.design},
    "Verifiers": {"verify": verify_commands.verify, "check-lossless": verify_commands.check_lossless,
                  "audit": audit_commands.audit},
    "Generation": {"decode": decode_commands.decode},
    "Experiments": {"sweep": sweep_commands.sweep, "plot": sweep_commands.plot},
    "Data": {"generate": bound_commands.generate, "dump": dataset_commands.dump,
             "datasets": dataset_commands.datasets},
    "Performance": {"bench": bench_commands.bench},
}
for panel, commands in COMMANDS.items():
    for name, command in commands.items():
        app.command(name, rich_help_panel=panel)(command)


def main() -> None:
    """Console-script entry point."""
    from .._malloc import tune_allocator

    tune_allocator()
    from .interrupt import install

    install()  # Ctrl-C that lands in a compiled kernel's ctypes callback is deferred, not lost
    try:
        app(prog_name="mdsd")
    finally:
        # CPython 3.11: a KeyboardInterrupt that passes through code run by exec(<string>) (numba and
        # dataclasses generate code that way) sets the interpreter's "unhandled Ctrl-C" flag even when
        # the CLI catches it; `python -m mdsd_cli` then dies by SIGINT instead of exiting 130. Any
        # exec(<string>) resets that flag on entry.
        exec("None")
