"""JDBC URLs and driver jars: from the SQLAlchemy URLs halfmq uses to what Spark's reader wants.

PostgreSQL's driver comes from Debian's ``libpostgresql-jdbc-java``, SQLite's from
``libxerial-sqlite-jdbc-java`` (both under ``/usr/share/java``, or ``HALFMQ_JDBC_JAR_DIR``);
``HALFMQ_JDBC_JARS`` or ``--jars`` point elsewhere.  No pyspark here.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path

from sqlalchemy.engine import make_url

JARS_ENV = "HALFMQ_JDBC_JARS"
JAR_DIR_ENV = "HALFMQ_JDBC_JAR_DIR"
SYSTEM_JAR_DIR = Path("/usr/share/java")


def system_jar_dir() -> Path:
    """Where the system's driver jars are: Debian's folder unless ``HALFMQ_JDBC_JAR_DIR`` says
    otherwise (another distribution's folder, or a missing one to prove a run needs none)."""
    return Path(os.environ.get(JAR_DIR_ENV) or SYSTEM_JAR_DIR)


@dataclasses.dataclass(frozen=True)
class Driver:
    kind: str
    java_class: str
    jar_names: tuple[str, ...]
    debian_package: str
    maven: str


DRIVERS = {
    "postgresql": Driver(
        "postgresql",
        "org.postgresql.Driver",
        ("postgresql.jar",),
        "libpostgresql-jdbc-java",
        "org.postgresql:postgresql:42.7.4",
    ),
    "sqlite": Driver(
        "sqlite",
        "org.sqlite.JDBC",
        ("sqlite-jdbc.jar", "xerial-sqlite-jdbc.jar"),
        "libxerial-sqlite-jdbc-java",
        "org.xerial:sqlite-jdbc:3.46.1.3",
    ),
}


class MissingDriverError(RuntimeError):
    """No jar holds the JDBC driver a source needs; the message says how to get it."""


@dataclasses.dataclass(frozen=True)
class JdbcTarget:
    """Where Spark's JDBC reader connects: URL, driver class and connection properties."""

    url: str
    driver: Driver
    properties: Mapping[str, str]


def driver_for(url: str) -> Driver:
    scheme = url.removeprefix("jdbc:").split(":", 1)[0].split("+", 1)[0]
    if scheme in ("postgres", "postgresql"):
        return DRIVERS["postgresql"]
    if scheme == "sqlite":
        return DRIVERS["sqlite"]
    raise ValueError(f"unsupported database URL {url!r}: expected PostgreSQL or SQLite")


def to_jdbc(url: str) -> JdbcTarget:
    """``postgresql+psycopg://user@host:5432/db?options=-csearch_path%3Dx`` becomes
    ``jdbc:postgresql://host:5432/db?currentSchema=x`` with ``user`` as a property;
    ``sqlite:///path`` becomes ``jdbc:sqlite:path``; ``jdbc:`` URLs pass through."""
    driver = driver_for(url)
    if url.startswith("jdbc:"):
        return JdbcTarget(url, driver, {})
    parsed = make_url(url)
    if driver.kind == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError("an in-memory SQLite store cannot be read by another process")
        return JdbcTarget(f"jdbc:sqlite:{Path(parsed.database).resolve()}", driver, {})
    props = {"user": parsed.username or "postgres"}
    if parsed.password:
        props["password"] = parsed.password
    query = {}
    schema = _search_path(parsed.query.get("options"))
    if schema:
        query["currentSchema"] = schema
    suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
    host = parsed.host or "localhost"
    port = parsed.port or 5432
    return JdbcTarget(f"jdbc:postgresql://{host}:{port}/{parsed.database}{suffix}", driver, props)


def _search_path(options: str | tuple[str, ...] | None) -> str | None:
    if options is None:
        return None
    text = options if isinstance(options, str) else " ".join(options)
    for part in text.split():
        if part.startswith("-csearch_path="):
            return part.split("=", 1)[1]
    return None


def find_jars(drivers: Iterable[Driver], extra: Iterable[str] = ()) -> list[str]:
    """The jars to put on Spark's classpath for ``drivers``, or a MissingDriverError that names
    the Debian package, the Maven coordinates and the flag / env var to use."""
    given = [p for p in (*extra, *os.environ.get(JARS_ENV, "").split(os.pathsep)) if p]
    jars: list[str] = []
    for driver in {d.kind: d for d in drivers}.values():
        own = [p for p in given if _holds(p, driver)]
        if own:
            jars.extend(own)
            continue
        folder = system_jar_dir()
        system = [folder / n for n in driver.jar_names if (folder / n).exists()]
        if not system:
            raise MissingDriverError(_how_to_get(driver))
        jars.append(str(system[0]))
    return [*jars, *(p for p in given if p not in jars)]


def _holds(path: str, driver: Driver) -> bool:
    return Path(path).exists() and driver.kind in Path(path).name.lower()


def _how_to_get(driver: Driver) -> str:
    names = " or ".join(str(system_jar_dir() / n) for n in driver.jar_names)
    return (
        f"the {driver.kind} JDBC driver ({driver.java_class}) was not found at {names}.\n"
        f"Get it with one of:\n"
        f"  sudo apt-get install -y {driver.debian_package}\n"
        f"  download {driver.maven} from Maven Central and pass --jars /path/to/it.jar "
        f"(or set {JARS_ENV}=/path/to/it.jar)"
    )
