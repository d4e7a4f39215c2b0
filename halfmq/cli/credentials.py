"""The keys a client command signs with, for a broker with the ACL on (docs/acl.md).

Every command that talks to a broker takes ``--access-key`` / ``--secret-key`` (env
``HALFMQ_ACCESS_KEY`` / ``HALFMQ_SECRET_KEY``); both or neither: without them requests go unsigned,
as a broker without ACL expects.  Prefer the environment for the secret: a command line is visible
to every user of the machine (``ps``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from framework.signing import ACCESS_KEY_ENV, SECRET_KEY_ENV, Credentials

AccessKeyOption = Annotated[
    str | None,
    typer.Option(
        "--access-key",
        envvar=ACCESS_KEY_ENV,
        help="The ACL account to sign requests with (with --secret-key).",
        show_default=False,
    ),
]
SecretKeyOption = Annotated[
    str | None,
    typer.Option(
        "--secret-key",
        envvar=SECRET_KEY_ENV,
        help=f"The account's secret key. Prefer setting {SECRET_KEY_ENV}: a command line is "
        "visible to other users (ps).",
        show_default=False,
    ),
]


def credentials(access_key: str | None, secret_key: str | None) -> Credentials | None:
    """The keys to sign with, or None (unsigned); one without the other is a usage error."""
    if not access_key and not secret_key:
        return None
    if not secret_key:
        raise typer.BadParameter(
            f"--access-key needs --secret-key (or {SECRET_KEY_ENV})", param_hint="--secret-key"
        )
    if not access_key:
        raise typer.BadParameter(
            f"--secret-key needs --access-key (or {ACCESS_KEY_ENV})", param_hint="--access-key"
        )
    return Credentials(access_key, secret_key)
