"""The demo's ACL: every run writes its own ``plain_acl.yml`` with fresh secret keys, so the demo
shows the broker as it should run in production -- every request signed, every account holding
only what it needs -- and no key of one run is any use in another.

The accounts (docs/acl.md has the keys of the file):

* ``bob-bank``: PUB on topic ``transfers`` and on its producer group ``bob-bank``;
* ``smith-bank``: SUB on topic ``transfers`` and on its consumer group ``smith-bank``;
* ``operator``: admin (the runner's own requests: topic creation, the DLQ, the group's view);
* ``outsider``: a real account, PUB|SUB on its own topic and group ``outsider`` only -- the one
  that tries to get in where it does not belong (:mod:`demo_bank.outsider`).

Requests are accepted from loopback only (``globalWhiteRemoteAddresses``).  The secrets live in
the file (mode 0600) and in the banks' environment, never on a command line or in a log."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from demo_bank.settings import BOB_GROUP, SMITH_GROUP, TOPIC
from framework.signing import ACCESS_KEY_ENV, SECRET_KEY_ENV, Credentials, HalfmqAuth

ACL_FILE = "plain_acl.yml"
OPERATOR, OUTSIDER = "operator", "outsider"
OUTSIDER_TOPIC = OUTSIDER_GROUP = "outsider"
LOOPBACK = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class DemoKeys:
    """The four accounts' keys of one run (``repr`` never shows a secret: see Credentials)."""

    bob: Credentials
    smith: Credentials
    operator: Credentials
    outsider: Credentials

    def all(self) -> tuple[Credentials, ...]:
        return (self.bob, self.smith, self.operator, self.outsider)

    def secret_keys(self) -> tuple[str, ...]:
        """Every secret key of the run: what must never show in a log, the console or the
        report."""
        return tuple(c.secret_key for c in self.all())


def new_secret() -> str:
    """43 characters of ``A-Z a-z 0-9 _ -`` (256 random bits); the file reader wants 7-256."""
    return secrets.token_urlsafe(32)


def new_keys() -> DemoKeys:
    return DemoKeys(
        bob=Credentials(BOB_GROUP, new_secret()),
        smith=Credentials(SMITH_GROUP, new_secret()),
        operator=Credentials(OPERATOR, new_secret()),
        outsider=Credentials(OUTSIDER, new_secret()),
    )


def _account(credentials: Credentials, topics: list[str], groups: list[str]) -> dict[str, Any]:
    """A non-admin account that may do only what ``topics`` and ``groups`` list."""
    return {
        "accessKey": credentials.access_key,
        "secretKey": credentials.secret_key,
        "admin": False,
        "defaultTopicPerm": "DENY",
        "defaultGroupPerm": "DENY",
        "topicPerms": topics,
        "groupPerms": groups,
    }


def acl_document(keys: DemoKeys) -> dict[str, Any]:
    """The file's content: each bank only what its role needs, the operator everything."""
    return {
        "globalWhiteRemoteAddresses": list(LOOPBACK),
        "accounts": [
            _account(keys.bob, [f"{TOPIC}=PUB"], [f"{BOB_GROUP}=PUB"]),
            _account(keys.smith, [f"{TOPIC}=SUB"], [f"{SMITH_GROUP}=SUB"]),
            {
                "accessKey": keys.operator.access_key,
                "secretKey": keys.operator.secret_key,
                "admin": True,
            },
            _account(keys.outsider, [f"{OUTSIDER_TOPIC}=PUB|SUB"], [f"{OUTSIDER_GROUP}=PUB|SUB"]),
        ],
    }


def write_acl(folder: Path, keys: DemoKeys) -> Path:
    """``folder/plain_acl.yml``, created afresh with mode 0600 (never widened for a moment: the
    old file is removed and the new one opened with that mode)."""
    path = folder / ACL_FILE
    path.unlink(missing_ok=True)
    text = "# halfmq demo: this run's accounts, written by demo_bank/acl.py (docs/demo.md)\n"
    text += yaml.safe_dump(acl_document(keys), sort_keys=False)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
    return path


def bank_env(credentials: Credentials) -> dict[str, str]:
    """What a bank's framework clients sign with (``Credentials.from_env``)."""
    return {ACCESS_KEY_ENV: credentials.access_key, SECRET_KEY_ENV: credentials.secret_key}


def signed_client(base_url: str, credentials: Credentials, timeout: float = 10) -> httpx.Client:
    """A client on the broker that signs every request with ``credentials``."""
    return httpx.Client(base_url=base_url, timeout=timeout, auth=HalfmqAuth(credentials))
