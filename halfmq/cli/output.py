"""What every client command shares: its options, its broker session, and how it prints.

A command's answer goes to stdout, as Rich tables and panels or, with ``--json``, as the broker's
raw JSON; errors go to stderr as one line (``--json``: the error envelope) and exit 1.  Usage errors
(bad options) are Click's: exit 2.  With ``--access-key`` / ``--secret-key`` (or their environment
variables) every request is signed (:mod:`halfmq.cli.credentials`).
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from framework.errors import (
    BrokerError,
    BrokerUnavailableError,
    HalfMQError,
    UnexpectedAnswerError,
)
from framework.signing import Credentials
from halfmq.cli.client import DEFAULT_BROKER, AdminClient, Json
from halfmq.cli.credentials import AccessKeyOption, SecretKeyOption, credentials

__all__ = [
    "DEFAULT_BROKER",
    "AccessKeyOption",
    "Broker",
    "BrokerOption",
    "JsonOption",
    "SecretKeyOption",
    "TimeoutOption",
    "broker_options",
    "cell",
    "connect",
    "credentials",
    "fields_panel",
    "refuse",
    "show",
    "table",
    "time_flag",
    "time_option",
]


# Where ``halfmq --broker URL <command>`` leaves its URL (``ctx.meta`` is shared by the whole
# command line): a command's own --broker wins over it, it wins over HALFMQ_BROKER.
GLOBAL_BROKER = "halfmq.broker"


def broker_url(value: str) -> str:
    """``value`` if it is an http(s) URL with a host, else a usage error (exit 2)."""
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise typer.BadParameter(f"{value!r} is not a URL: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise typer.BadParameter(f"{value!r} is not an http(s) URL such as {DEFAULT_BROKER}")
    return value


def _broker_option(ctx: typer.Context, param: typer.CallbackParam, value: str) -> str:
    """The command's own --broker; else the global one (``halfmq --broker URL ...``); else
    HALFMQ_BROKER or the default."""
    given = ctx.meta.get(GLOBAL_BROKER)
    source = ctx.get_parameter_source(param.name or "broker")
    if given is not None and (source is None or source.name != "COMMANDLINE"):
        return str(given)
    return broker_url(value)


BrokerOption = Annotated[
    str,
    typer.Option(
        "--broker",
        envvar="HALFMQ_BROKER",
        callback=_broker_option,
        help="The broker's base URL.",
        show_default=True,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the broker's raw JSON answer (for scripts).")
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", min=0.1, help="Seconds to wait for the broker's answer.")
]


def time_flag(meaning: str | None = None) -> Any:
    """The ``typer.Option`` of a time that :func:`time_option` reads, its help naming the forms
    it takes after ``meaning`` (what the time is), if given."""
    forms = "RFC 3339 time or epoch milliseconds."
    return typer.Option(help=forms if meaning is None else f"{meaning}: {forms}")


def time_option(value: str | None, hint: str) -> str | int | None:
    """An RFC 3339 time (kept as text) or epoch milliseconds (sent as a number)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is neither an RFC 3339 time (2026-11-21T10:00:00Z) nor epoch milliseconds",
            param_hint=hint,
        ) from None
    return text


def refuse(what: str, why: str) -> NoReturn:
    """A bad input the command cannot start with (settings, a file): ``what: why`` as one line on
    stderr, whatever the terminal's width, and exit 2 -- never a traceback."""
    from broker_service.logs import redact  # masks a password in a URL

    line = Text(f"{what}: ", style="red")
    line.append(redact(why))
    Console(stderr=True, highlight=False).print(line, soft_wrap=True)
    raise typer.Exit(2)


# -- talking to the broker -----------------------------------------------------------------------


@contextmanager
def connect(
    broker: str, timeout: float, as_json: bool, keys: Credentials | None = None
) -> Iterator[AdminClient]:
    """A client (signing with ``keys``) whose failures become one line on stderr and exit code 1
    -- never a traceback."""
    try:
        with AdminClient(broker, timeout=timeout, credentials=keys) as client:
            yield client
    except HalfMQError as exc:
        _print_error(exc, as_json)
        raise typer.Exit(1) from None


@dataclass(frozen=True, slots=True)
class Broker:
    """The broker a command talks to and how: what the options each such command takes
    (:func:`broker_options`) say."""

    url: str
    as_json: bool
    timeout: float
    access_key: str | None
    secret_key: str | None = field(repr=False)

    def connect(self) -> AbstractContextManager[AdminClient]:
        """A client for the command's requests (see :func:`connect`); a key given without the
        other is a usage error, raised here."""
        keys = credentials(self.access_key, self.secret_key)
        return connect(self.url, self.timeout, self.as_json, keys)

    def show(self, answer: Any, render: Callable[[Any], RenderableType]) -> None:
        """The answer as JSON (``--json``) or as ``render`` makes it (see :func:`show`)."""
        show(answer, self.as_json, render)

    def ask(
        self, request: Callable[[AdminClient], Any], render: Callable[[Any], RenderableType]
    ) -> None:
        """What most commands do: one request on a client of its own, then its answer shown."""
        with self.connect() as client:
            answer = request(client)
        self.show(answer, render)


def broker_options(
    *, timeout: float = 10.0, json_option: bool = True
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A command that talks to a broker, with the options each such command takes after its own:
    ``--broker``, ``--json`` (unless ``json_option`` is false), ``--timeout`` (default
    ``timeout``), ``--access-key`` and ``--secret-key``.  The command's first parameter,
    ``broker: Broker``, gets them as one :class:`Broker`."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True)
        shared = [
            ("broker", BrokerOption, DEFAULT_BROKER),
            *([("as_json", JsonOption, False)] if json_option else []),
            ("timeout", TimeoutOption, timeout),
            ("access_key", AccessKeyOption, None),
            ("secret_key", SecretKeyOption, None),
        ]
        parameters = [p for p in own.parameters.values() if p.name != "broker"]
        parameters += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value, annotation=kind)
            for name, kind, value in shared
        ]

        @functools.wraps(command)
        def run(
            *args: Any,
            broker: str,
            timeout: float,
            access_key: str | None,
            secret_key: str | None,
            as_json: bool = False,
            **kwargs: Any,
        ) -> None:
            command(Broker(broker, as_json, timeout, access_key, secret_key), *args, **kwargs)

        # The signature Typer reads: its annotations are objects, not the postponed strings.
        run.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        return run

    return decorate


def envelope(error: HalfMQError) -> Json:
    """The error in the broker's own shape, so ``--json`` callers parse one format."""
    detail: Json
    if isinstance(error, BrokerUnavailableError):
        url = error.urls[0]
        message = f"cannot reach the broker at {url}: {_unreachable(error.__cause__)}"
        code, detail = "BROKER_UNREACHABLE", {"url": url}
    elif isinstance(error, BrokerError):
        code, message, detail = error.code, error.message, error.detail
    elif isinstance(error, UnexpectedAnswerError):
        code, message = "UNEXPECTED_ANSWER", error.message
        detail = {"url": error.url, "status": error.status}
    else:
        code, message, detail = "CLIENT_ERROR", error.message, {}
    return {"error": {"code": code, "message": message, "detail": detail}}


def _unreachable(cause: BaseException | None) -> str:
    """Why no answer came (the transport's exception)."""
    if isinstance(cause, httpx.TimeoutException):
        return "no answer in time"
    return str(cause) or type(cause).__name__


def _print_error(error: HalfMQError, as_json: bool) -> None:
    shape = envelope(error)
    if as_json:
        typer.echo(_dumps(shape), err=True)
        return
    err = Console(stderr=True, highlight=False)
    line = Text("error: ", style="bold red")
    if isinstance(error, BrokerError):
        line.append(f"{error.code} (HTTP {error.status}): ", style="bold")
    line.append(shape["error"]["message"])
    if isinstance(error, BrokerError) and error.status in (401, 403):  # the ACL refused it
        line.append(_KEY_HINTS.get(error.code, ""))
        err.print(line, soft_wrap=True)  # one line: the detail of a refusal adds nothing to act on
        return
    err.print(line, soft_wrap=True)
    if isinstance(error, BrokerUnavailableError):
        hint = "is it running? pass --broker URL or set HALFMQ_BROKER"
        err.print(Text(hint, style="dim"), soft_wrap=True)
    elif detail := _detail_line(shape["error"]["detail"]):
        err.print(Text(detail, style="dim"), soft_wrap=True)


_KEY_HINTS = {
    "SIGNATURE_MISSING": " (give --access-key and --secret-key, or set HALFMQ_ACCESS_KEY and "
    "HALFMQ_SECRET_KEY)",
    "ACCESS_KEY_UNKNOWN": " (check --access-key / HALFMQ_ACCESS_KEY)",
    "SIGNATURE_INVALID": " (check --secret-key / HALFMQ_SECRET_KEY)",
}


def _detail_line(detail: Json) -> str:
    """The envelope's detail; a validation error's first complaint is its message already."""
    errors = detail.get("errors")
    if isinstance(errors, list):
        if len(errors) < 2:
            return ""
        return "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', []))}: {e.get('msg', '')}"
            for e in errors
            if isinstance(e, dict)
        )
    return ", ".join(f"{key}={value}" for key, value in detail.items())


# -- printing answers ----------------------------------------------------------------------------


def show(answer: Any, as_json: bool, render: Callable[[Any], RenderableType]) -> None:
    """The answer as JSON (``--json``) or as what ``render`` makes of it."""
    if as_json:
        typer.echo(_dumps(answer))
    else:
        Console(highlight=False).print(render(answer))


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


_ISO_TIME = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d+)?")


def cell(value: Any, *, to_the_second: bool = False) -> Text:
    """A value as plain text: user data is never read as Rich markup.  An RFC 3339 time shows
    its date and time apart (``2026-11-21 10:00:00.123Z``), so a narrow column wraps it between
    them rather than inside either; ``to_the_second`` drops its fraction (a table's rows)."""
    if value is None or value == [] or value == {}:
        return Text("-", style="dim")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, list):
        return Text(", ".join(str(v) for v in value))
    if isinstance(value, dict):
        return Text(", ".join(f"{k}={v}" for k, v in value.items()))
    if isinstance(value, str):
        return Text(_ISO_TIME.sub(r"\1 \2" if to_the_second else r"\1 \2\3", value))
    return Text(str(value))


def fields_panel(title: str, fields: Sequence[tuple[str, Any]]) -> Panel:
    """One object as a panel of ``name  value`` lines."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold cyan", no_wrap=True)
    grid.add_column(overflow="fold")
    for name, value in fields:
        grid.add_row(name, value if isinstance(value, Text) else cell(value))
    return Panel(grid, title=Text(title), title_align="left", expand=False)


def table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, count: bool = True
) -> Table:
    """Objects as a table, one row each (see :class:`WordWrapTable` for how it fits).

    Columns named ``... id`` keep every character on one line (ids are copied into the next
    command).  When the columns' longest words cannot stand side by side in the terminal, each
    row is printed as a record instead (``name  value`` lines), so nothing is cut.  Times are to
    the second (``show`` commands give the milliseconds).
    """
    cells = [
        [v if isinstance(v, Text) else cell(v, to_the_second=True) for v in row] for row in rows
    ]
    caption = f"{len(rows)} shown" if count else None
    grid = WordWrapTable(cells, title=Text(title), title_justify="left", caption=caption)
    for name in columns:
        grid.add_column(name, no_wrap=name.endswith(" id"), overflow="ellipsis")
    for row in cells:
        grid.add_row(*row)
    return grid


class WordWrapTable(Table):
    """A table that wraps its cells between words, never inside one.

    Rich shrinks the columns of a table that is too wide for the terminal evenly, whatever they
    hold, and then folds or cuts words (``transfers`` as ``transf`` / ``ers``, an id as
    ``01A22…``).  This one measures at each render: every column gets at least its longest word
    (an id column its whole id), and the room left goes to the columns in proportion to how much
    more they could use.  When even the longest words do not fit side by side (seven columns at
    80), the rows are printed as records, one ``column  value`` line each, as ``psql``'s expanded
    display does: every value whole, wrapped between words.
    """

    def __init__(self, cells: Sequence[Sequence[Text]], **options: Any) -> None:
        super().__init__(**options)
        self.cells = cells

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        headers = [column.header for column in self.columns]
        fit = _fit(headers, self.cells, options.max_width)
        if fit is None:
            yield self._records(headers)
            return
        for column, width in zip(self.columns, fit or [None] * len(self.columns), strict=True):
            column.width = width
        yield from super().__rich_console__(console, options)

    def _records(self, headers: Sequence[Any]) -> RenderableType:
        parts: list[RenderableType] = []
        if self.title is not None:
            parts.append(Text(self.title) if isinstance(self.title, str) else self.title)
        for number, row in enumerate(self.cells, 1):
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold cyan", no_wrap=True)
            grid.add_column(overflow="fold")
            for header, value in zip(headers, row, strict=True):
                grid.add_row(str(header), value)
            parts.append(Panel(grid, title=Text(str(number)), title_align="left", expand=False))
        if self.caption is not None:
            parts.append(Text(str(self.caption), style="dim"))
        return Group(*parts)


def _fit(
    headers: Sequence[Any], cells: Sequence[Sequence[Text]], width: int
) -> list[int | None] | None:
    """The columns' widths that let every word of ``cells`` and ``headers`` stand whole in
    ``width`` columns: ``[]`` when every line fits as it is (Rich's own widths), None when the
    longest words themselves do not fit side by side."""
    room = width - (3 * len(headers) + 1)  # a border and a space each side per column
    columns = [[Text(str(h)), *(row[i] for row in cells)] for i, h in enumerate(headers)]
    words = [max(_longest_word(t) for t in column) for column in columns]
    lines = [max(t.cell_len for t in column) for column in columns]
    if sum(lines) <= room:
        return []
    if sum(words) > room:
        return None
    spare, wants = room - sum(words), [line - word for line, word in zip(lines, words, strict=True)]
    return [word + spare * want // sum(wants) for word, want in zip(words, wants, strict=True)]


def _longest_word(text: Text) -> int:
    return max((cell_len(word) for word in text.plain.split()), default=0)
