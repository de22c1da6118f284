"""The `lucid-hub` command. Each subcommand parses its options, calls the domain code and
prints; errors are one line on stderr with a non-zero exit, never a traceback. The commands
are grouped in modules (patches, hub, partners, rules, bench); importing them registers them
on the root group (base.cli)."""

from __future__ import annotations

import sys

import click

from lucid_hub.cli import bench, hub, partners, patches, rules  # noqa: F401 (their commands register)
from lucid_hub.cli.base import EXIT_ERROR, EXIT_INTERNAL, EXIT_USAGE, cli, one_line
from lucid_hub.errors import LucidError

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    try:
        result = cli.main(args=argv, prog_name="lucid-hub", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.UsageError as exc:
        click.echo(f"lucid-hub: usage: {one_line(exc.format_message())} (see --help)", err=True)
        return EXIT_USAGE
    except click.Abort:
        click.echo("lucid-hub: aborted", err=True)
        return EXIT_ERROR
    except click.ClickException as exc:  # e.g. a benchmark that could not run
        click.echo(f"lucid-hub: error: {one_line(exc.format_message())}", err=True)
        return EXIT_ERROR
    except LucidError as exc:
        click.echo(f"lucid-hub: error: {one_line(str(exc))}", err=True)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the promise is one line, never a traceback
        reason = database_refusal(exc)
        if reason is not None:  # the database refused or is unreachable: its reason, not ours
            click.echo(f"lucid-hub: error: the database (LUCID_DATABASE_URL or LUCID_DATABASE_HOST …): {reason}",
                       err=True)
            return EXIT_ERROR
        click.echo(f"lucid-hub: internal error: {type(exc).__name__}: {one_line(str(exc))}",
                   err=True)
        return EXIT_INTERNAL
    return result if isinstance(result, int) else 0


def database_refusal(exc: Exception) -> str | None:
    """The database's reason when `exc` is SQLAlchemy's error, else None. SQLAlchemy is looked
    up, not imported: the commands that never open a database (diff, keys, verify, canon …)
    do not import it (0.3 s of every such command's start)."""
    errors = sys.modules.get("sqlalchemy.exc")
    if errors is None or not isinstance(exc, errors.SQLAlchemyError):
        return None
    return one_line(str(getattr(exc, "orig", None) or exc))[:300]
