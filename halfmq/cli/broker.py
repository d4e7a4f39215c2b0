"""``halfmq broker serve``: run a broker; ``halfmq broker list``: the brokers sharing its store.

``serve``'s flags are made from the settings model; running it (:mod:`halfmq.cli.serving`) is
imported only once the settings are valid, so neither this command's help nor ``list`` loads
uvicorn or the broker's app."""

from __future__ import annotations

import difflib
import inspect
import typing
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from rich.console import RenderableType

from broker_service.settings import BrokerSettings, load_settings
from halfmq.cli.client import Json, json_call
from halfmq.cli.output import Broker, broker_options, refuse, table

app = typer.Typer(help="Run the broker; list the brokers sharing its store.", no_args_is_help=True)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        help="Settings file (.yaml, .toml or .json)  [default: none]",
        exists=True,
        show_default=False,
    ),
]

# Shorter spellings of some settings' flags (the long one works too).
_ALIASES = {"acl_file": "--acl"}


def build_settings(config: Path | None, overrides: dict[str, Any]) -> BrokerSettings:
    """Environment < config file < flags; a bad value exits 2 with one line saying which
    setting and why (every complaint, ``;``-separated)."""
    try:
        return load_settings(config, overrides)
    except ValidationError as exc:
        refuse("invalid settings", settings_errors(exc))
    except (ValueError, OSError) as exc:
        refuse("invalid settings", str(exc))


def settings_errors(error: ValidationError) -> str:
    """pydantic's complaints on one line: ``port: Input should be ...; prot: not a setting (did
    you mean 'port'?)`` -- never the values given (a secret may be among them)."""
    parts = []
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        name = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = f"not a setting{_did_you_mean(name)}"
        parts.append(f"{name}: {message}" if name else message)
    return "; ".join(parts)


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name, list(BrokerSettings.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _setting_options() -> list[inspect.Parameter]:
    """One ``--<name>`` flag per broker setting, made from the settings model itself, so a new
    setting is a flag without anyone remembering to add it."""
    parameters = []
    for name, field in BrokerSettings.model_fields.items():
        annotation = field.annotation
        if typing.get_origin(annotation) is dict:
            annotation = str  # "t1=g1,t2=g2": the setting's validator reads the pairs
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{name.replace('_', '-')}"] if annotation is bool else [flag]
        if name in _ALIASES:
            decls.append(_ALIASES[name])
        # The flag's own default stays None ("not given": the file or environment decides); its
        # help shows the setting's
        option = typer.Option(*decls, help=_help(field), show_default=False)
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[annotation | None, option],  # type: ignore[operator]
            )
        )
    return parameters


def _help(field: FieldInfo) -> str:
    """The setting's description and its default, in click's ``[default: ...]`` form (a
    description that explains its default itself is left as it is)."""
    description = field.description or ""
    if "Default:" in description:
        return description
    value = field.get_default(call_default_factory=True)
    if value is None or value == []:
        shown = "none"
    elif value == "":
        shown = "empty"
    elif isinstance(value, bool):
        shown = "on" if value else "off"
    elif isinstance(value, Enum):
        shown = str(value.value)
    else:
        shown = str(value)
    return f"{description}  [default: {shown}]"


def serve(config: ConfigOption = None, **flags: Any) -> None:
    """Start the broker (default 127.0.0.1:9876 on the SQLite file ./halfmq.db).

    Every setting is also HALFMQ_<NAME> in the environment and a key of the config file; a flag
    wins over the file, the file over the environment."""
    # A list setting's flag (--allowed-hosts) not given is an empty list: not given.
    given = {name: value for name, value in flags.items() if value not in ((), [])}
    settings = build_settings(config, given)
    from halfmq.cli.serving import run  # uvicorn and the broker: only to serve

    run(settings)


# The signature Typer reads: its annotations are objects, not this module's postponed strings.
serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(
            "config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ConfigOption
        ),
        *_setting_options(),
    ]
)

app.command()(serve)


# -- halfmq broker list --------------------------------------------------------------------------


@app.command("list")
@broker_options(timeout=30.0)
def list_brokers(broker: Broker) -> None:
    """The brokers sharing the store of --broker (GET /v1/brokers, admin): the live ones first,
    the others with when they were last seen."""
    broker.ask(lambda client: client.call(json_call("GET", "/v1/brokers")), render_brokers)


def render_brokers(answer: Json) -> RenderableType:
    rows = [
        [
            b["broker_id"],
            b["address"],
            b["version"],
            b["store"],
            "live" if b["live"] else f"last seen {b['seen_seconds_ago']:.0f} s ago",
            b["started_at"],
        ]
        for b in answer["brokers"]
    ]
    columns = ["broker", "address", "version", "store", "seen", "started"]
    return table("brokers", columns, rows)
