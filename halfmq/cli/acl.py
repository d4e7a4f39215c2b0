"""``halfmq acl show|version|update-account|delete-account|update-global-white``: RocketMQ's mqadmin
ACL commands (getAclConfig, clusterAclConfigVersion, updateAclConfig, deleteAclConfig,
updateGlobalWhiteAddr) against a broker's ``/v1/acl`` routes; they need an admin account."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType

from halfmq.cli.output import Broker, broker_options, fields_panel, table

app = typer.Typer(help="Show and change the broker's ACL (admin account).", no_args_is_help=True)

KeyOption = Annotated[str, typer.Option("-a", "--access-key-of", help="The account's accessKey.")]
# --default-topic-perm and --default-group-perm, named after their parameters.
DefaultPermOption = Annotated[str | None, typer.Option(help="DENY, PUB, SUB or PUB|SUB.")]


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


@app.command("show")
@broker_options()
def show_(broker: Broker) -> None:
    """The enforced ACL: version, global white list and accounts (never a secret)."""
    broker.ask(lambda client: client.acl(), _render)


@app.command()
@broker_options()
def version(broker: Broker) -> None:
    """The version the broker enforces (the same on every broker of one database)."""
    broker.ask(
        lambda client: client.acl("/version"),
        lambda a: fields_panel("ACL", [("version", a["version"])]),
    )


@app.command("update-account")
@broker_options()
def update_account(
    broker: Broker,
    account: KeyOption,
    secret: Annotated[
        str | None, typer.Option("-s", "--secret", help="Its secretKey (needed for a new account).")
    ] = None,
    topics: Annotated[
        str | None, typer.Option("-t", "--topic-perms", help="topicA=DENY,topicD=SUB (replaces).")
    ] = None,
    groups: Annotated[
        str | None, typer.Option("-g", "--group-perms", help="groupA=PUB,groupB=SUB (replaces).")
    ] = None,
    admin: Annotated[
        bool | None, typer.Option("--admin/--no-admin", help="An admin account may do everything.")
    ] = None,
    white: Annotated[
        str | None, typer.Option("--white", help="whiteRemoteAddress ('' removes it).")
    ] = None,
    default_topic_perm: DefaultPermOption = None,
    default_group_perm: DefaultPermOption = None,
) -> None:
    """Create an account or change the fields given (mqadmin updateAclConfig)."""
    changes: dict[str, Any] = {
        "secret_key": secret,
        "admin": admin,
        "white_remote_address": white,
        "default_topic_perm": default_topic_perm,
        "default_group_perm": default_group_perm,
        "topic_perms": _split(topics),
        "group_perms": _split(groups),
    }
    body = {key: value for key, value in changes.items() if value is not None}
    broker.ask(lambda client: client.update_account(account, body), _render_account)


@app.command("delete-account")
@broker_options()
def delete_account(broker: Broker, account: KeyOption) -> None:
    """Remove an account (mqadmin deleteAclConfig)."""
    with broker.connect() as client:
        client.delete_account(account)
    broker.show({"deleted": account}, lambda a: fields_panel("deleted", [("account", account)]))


@app.command("update-global-white")
@broker_options()
def update_global_white(
    broker: Broker,
    addresses: Annotated[
        str, typer.Option("--addresses", help="10.10.103.*,192.168.0.0/16 (replaces the list).")
    ],
) -> None:
    """Replace globalWhiteRemoteAddresses (mqadmin updateGlobalWhiteAddr)."""
    broker.ask(lambda client: client.update_global_white(_split(addresses) or []), _render)


def _render_account(account: dict[str, Any]) -> RenderableType:
    return fields_panel(f"account {account['access_key']}", list(account.items()))


def _render(answer: dict[str, Any]) -> RenderableType:
    head = fields_panel(
        "ACL",
        [
            ("version", answer["version"]),
            ("global white", ", ".join(answer["global_white_remote_addresses"]) or "(any)"),
        ],
    )
    rows = [
        (a["access_key"], a["admin"], a["white_remote_address"] or "", a["default_topic_perm"],
         a["default_group_perm"], ", ".join(a["topic_perms"]), ", ".join(a["group_perms"]))
        for a in answer["accounts"]
    ]  # fmt: skip
    columns = ("access key id", "admin", "white", "topics by default", "groups by default",
               "topic perms", "group perms")  # fmt: skip
    return Group(head, table("accounts", columns, rows))
