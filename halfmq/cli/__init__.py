"""The ``halfmq`` command line (Typer + Rich).

``halfmq broker serve``, ``halfmq db upgrade``, ``halfmq export`` and ``halfmq reconcile`` work on
the store directly; every other command talks REST to ``--broker URL`` (env ``HALFMQ_BROKER``,
default http://127.0.0.1:9876), signing its requests with ``--access-key`` / ``--secret-key`` (env
``HALFMQ_ACCESS_KEY`` / ``HALFMQ_SECRET_KEY``) for a broker with the ACL on.  ``--broker`` may
also come before the command (``halfmq --broker URL topic list``); the command's own wins.

Each command's module is imported only when that command runs (or shows its help): they import
the broker, the framework, SQLAlchemy, FastAPI or Spark, and ``halfmq --help`` needs none of them.
:class:`LazyGroup` lists the commands from :data:`COMMANDS` -- a name, the line ``halfmq --help``
shows, and how to load it -- and builds a command the first time it is asked for.

The client alone (``pip install halfmq``) runs the REST commands; a command that needs an extra's
libraries (the broker's, Spark's) says which one to install, in one line, and exits 2.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True, slots=True)
class Lazy:
    """A command ``halfmq --help`` lists without importing it: ``about`` is its help's first
    paragraph (the group's ``help=``, the function's docstring), ``target`` where it is
    (``module:attribute``, a Typer group or a command function), imported by :meth:`load`."""

    about: str
    target: str

    def load(self) -> typer.Typer | Callable[..., Any]:
        module, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module), attribute)  # type: ignore[no-any-return]


# In the order `halfmq --help` lists them; test_the_listed_help_is_each_commands_own
# (tests/acceptance/halfmq/test_cli_first_hour.py) checks each ``about``
# against the loaded command's own help.
COMMANDS: dict[str, Lazy] = {
    "send": Lazy("Send one message to TOPIC; prints where it was stored.", "halfmq.cli.send:send"),
    "consume": Lazy(
        "Receive messages of GROUP, print each as one JSON line, and ack them.",
        "halfmq.cli.consume:consume",
    ),
    "demo": Lazy(
        "Bob's bank pays Smith's bank: the broker and both banks as real processes, thousands "
        "of concurrent transfers, injected faults, and the invariants read back from both "
        "databases. Exits 1 when an invariant fails or the run does not settle.",
        "halfmq.cli.demo:demo",
    ),
    "export": Lazy(
        "Export one day of the store (and of the banks' ledgers) as Parquet for "
        "`halfmq reconcile --parquet`.",
        "spark_reconcile.cli:export",
    ),
    "reconcile": Lazy(
        "Reconcile one day: halves, ops, deliveries and ledgers. Exit 0 clean, 1 warnings, "
        "2 critical (or the job could not run).",
        "spark_reconcile.cli:reconcile",
    ),
    "broker": Lazy("Run the broker; list the brokers sharing its store.", "halfmq.cli.broker:app"),
    "db": Lazy("The store's schema (Alembic migrations).", "halfmq.cli.db:app"),
    "topic": Lazy("Create, list, show and delete topics.", "halfmq.cli.topics:app"),
    "transaction": Lazy("Inspect transactions (half messages).", "halfmq.cli.transactions:app"),
    "message": Lazy("Query messages.", "halfmq.cli.messages:app"),
    "group": Lazy("Create, show and reset consumer groups.", "halfmq.cli.groups:app"),
    "dlq": Lazy("List and resend a consumer group's dead letters.", "halfmq.cli.dlq:app"),
    "acl": Lazy("Show and change the broker's ACL (admin account).", "halfmq.cli.acl:app"),
    "store": Lazy(
        "Show what the store holds; purge what retention lets go.", "halfmq.cli.store:app"
    ),
    "framework": Lazy(
        "The framework's tables (local-transaction log, inbox) in your service's database.",
        "halfmq.cli.framework_tables:app",
    ),
}


# The top-level modules each extra installs (pyproject's optional dependencies), by the name an
# import fails with; halfmq's own parts are none of them, so a missing module of ours stays a bug.
EXTRAS: dict[str, tuple[str, frozenset[str]]] = {
    "broker": (
        "the broker",
        frozenset(
            {
                "fastapi",
                "starlette",
                "uvicorn",
                "alembic",
                "psycopg",
                "pydantic",
                "pydantic_core",
                "pydantic_settings",
                "typing_extensions",
                "prometheus_client",
                "yaml",
                "asgi_lifespan",
                "jinja2",
                "multipart",
                "python_multipart",
                "grpc",
                "rocketmq",
            }
        ),
    ),
    "spark": ("Spark", frozenset({"pyspark", "pyarrow", "pandas", "zstandard"})),
}


def extra_missing(error: ModuleNotFoundError) -> tuple[str, str] | None:
    """``(extra, what it installs)`` when ``error`` is an extra's library missing, else None."""
    top = (error.name or "").partition(".")[0]
    for extra, (what, modules) in EXTRAS.items():
        if top in modules:
            return extra, what
    return None


def needs_extra(command: str, error: ModuleNotFoundError) -> NoReturn:
    """One line on stderr naming the extra to install, and exit 2; any other missing module (one
    of halfmq's own) is raised as it is."""
    missing = extra_missing(error)
    if missing is None:
        raise error
    extra, what = missing
    typer.echo(
        f"error: halfmq {command} needs {what} ({error.name} is not installed): "
        f"pip install 'halfmq[{extra}]'",
        err=True,
    )
    raise typer.Exit(2)


def build(name: str, lazy: Lazy) -> Any:
    """The command as ``add_typer`` / ``command`` would have made it under the top app (click's
    own help layout, as the top app's)."""
    parent = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    parent.callback()(lambda: None)  # a group, whatever it holds
    loaded = lazy.load()
    if isinstance(loaded, typer.Typer):
        parent.add_typer(loaded, name=name)
    else:
        parent.command(name)(loaded)
    return typer.main.get_group(parent).commands[name]


class _Commands(MutableMapping[str, Any]):
    """The group's commands: every name is known at once, a command is built when first read."""

    def __init__(self, lazy: Mapping[str, Lazy], built: MutableMapping[str, Any]) -> None:
        self.lazy = lazy
        self.built = built

    def __getitem__(self, name: str) -> Any:
        if name not in self.built:
            if name not in self.lazy:
                raise KeyError(name)
            self.built[name] = build(name, self.lazy[name])
        return self.built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        del self.built[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.lazy
        yield from (name for name in self.built if name not in self.lazy)

    def __len__(self) -> int:
        return len(set(self.lazy) | set(self.built))


class LazyGroup(TyperGroup):
    """The top ``halfmq`` group: lists :data:`COMMANDS` from their ``about`` lines and imports a
    command only to run it or show its own help."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands(COMMANDS, dict(self.commands))

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        try:
            return self.commands.get(cmd_name)
        except ModuleNotFoundError as error:  # importing the command
            needs_extra(cmd_name, error)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as error:  # running it: a lazy import inside the command
            needs_extra(ctx.invoked_subcommand or "", error)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # What click's own does, with a stand-in (its ``about``) for a command not yet imported.
        commands: _Commands = self.commands  # type: ignore[assignment]
        rows = []
        for name in self.list_commands(ctx):
            if name in commands.built:
                rows.append((name, commands.built[name]))
            else:
                rows.append((name, TyperCommand(name=name, help=COMMANDS[name].about)))
        visible = [(name, command) for name, command in rows if not command.hidden]
        if not visible:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in visible)
        with formatter.section("Commands"):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in visible])


def _global_broker(ctx: typer.Context, value: str | None) -> str | None:
    if value is not None:
        from halfmq.cli.output import GLOBAL_BROKER, broker_url

        ctx.meta[GLOBAL_BROKER] = broker_url(value)
    return value


app = typer.Typer(
    name="halfmq",
    cls=LazyGroup,
    help="RocketMQ-style transactional (half) messages for Python microservices.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's own help layout: Rich's option table cuts long flag names (--transaction-check-
    # interval-seconds, a --no- twin) at 80 columns, click's puts a long name on a line of its own
    rich_markup_mode=None,
)


@app.callback()
def _root(
    broker: Annotated[
        str | None,
        typer.Option(
            "--broker",
            metavar="URL",
            callback=_global_broker,
            help="The broker's base URL for the command that follows (its own --broker wins; "
            "else HALFMQ_BROKER, else http://127.0.0.1:9876).",
            show_default=False,
        ),
    ] = None,
) -> None:
    pass


def main() -> None:
    app()
