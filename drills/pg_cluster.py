"""A throwaway PostgreSQL primary with a synchronous standby, for failover tests and benches.

Built from the machine's own PostgreSQL binaries (``initdb``, ``pg_ctl``, ``pg_basebackup``;
``HALFMQ_PG_BIN``, default ``/usr/lib/postgresql/15/bin``) in a private temporary directory, on
free loopback ports: nothing of the machine's own cluster is touched.  ``synchronous_commit = on``
with ``synchronous_standby_names = '*'``: a commit returns once the standby has flushed it, so a
primary that dies takes nothing acknowledged with it.

::

    with PgCluster.create() as cluster:        # two nodes, the first the primary
        url = cluster.url("halfmq")            # the multi-host URL brokers connect with
        cluster.kill_primary()                 # SIGKILL, as a machine that died
        cluster.promote()                      # the standby takes over, alone
        cluster.rebuild_standby()              # the dead node again, as a standby of the new one

PostgreSQL refuses to run as root: as root (CI) every server command runs as an unprivileged
user (``HALFMQ_PG_USER``, default ``postgres``) through ``setpriv``, and the directory is theirs.
Every wait is bounded; :meth:`PgCluster.close` stops every server by its process group, whatever
state it is in.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg

PG_BIN = Path(os.environ.get("HALFMQ_PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "postgres"  # the cluster's own superuser (initdb -U), trusted on loopback only
_WAIT_SECONDS = 60.0
# The nodes' settings: a primary ships WAL to one synchronous standby; a standby serves reads.
_CONF = """
listen_addresses = '127.0.0.1'
unix_socket_directories = '{sockets}'
max_connections = 200
shared_buffers = 64MB
wal_level = replica
max_wal_senders = 4
wal_keep_size = 256MB
hot_standby = on
synchronous_commit = on
synchronous_standby_names = ''  # '*' once a standby streams (_add_standby)
wal_receiver_status_interval = 1s
log_line_prefix = '%m [%p] %a '
"""


class ClusterError(RuntimeError):
    """The cluster could not be built or could not do what was asked (the message says why)."""


def missing_tools() -> list[str]:
    """What this machine lacks to build a cluster (empty when nothing): a test says it, and under
    CI fails rather than skips."""
    missing = [
        str(PG_BIN / tool)
        for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres")
        if not (PG_BIN / tool).is_file()
    ]
    if os.geteuid() == 0:
        user = os.environ.get("HALFMQ_PG_USER", "postgres")
        try:
            pwd.getpwnam(user)
        except KeyError:
            missing.append(f"an unprivileged user {user!r} to run PostgreSQL as (HALFMQ_PG_USER)")
        if shutil.which("setpriv") is None:
            missing.append("setpriv (util-linux), to run PostgreSQL as that user")
    return missing


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Node:
    """One PostgreSQL server of the cluster: its data directory, port and log."""

    name: str
    port: int
    data: Path
    log: Path

    @property
    def pid(self) -> int | None:
        """The postmaster's PID from its ``postmaster.pid`` (None when the file is gone)."""
        try:
            first = (self.data / "postmaster.pid").read_text().split("\n", 1)[0]
        except (FileNotFoundError, PermissionError):
            return None
        return int(first) if first.strip().isdigit() else None

    def dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database}"


class PgCluster:
    """A primary and its synchronous standby on loopback (see the module's docstring)."""

    def __init__(self, root: Path, nodes: Sequence[Node], *, run_as: str | None) -> None:
        self.root = root
        self.nodes = list(nodes)
        self.run_as = run_as
        self.primary = self.nodes[0]
        self.databases: list[str] = []

    # -- building -------------------------------------------------------------------------------

    @classmethod
    def create(cls, databases: Sequence[str] = ("halfmq",), *, fsync: bool = True) -> PgCluster:
        """Two nodes, the first the primary, the second streaming from it synchronously;
        ``databases`` created on the primary.  ``fsync`` off: faster, and a process kill loses
        nothing either way (the page cache outlives the process)."""
        problems = missing_tools()
        if problems:
            raise ClusterError("cannot build a PostgreSQL cluster: missing " + "; ".join(problems))
        run_as = os.environ.get("HALFMQ_PG_USER", "postgres") if os.geteuid() == 0 else None
        root = Path(tempfile.mkdtemp(prefix="halfmq-pg-"))
        nodes = [
            Node(name, free_port(), root / name, root / f"{name}.log")
            for name in ("node1", "node2")
        ]
        cluster = cls(root, nodes, run_as=run_as)
        try:
            if run_as is not None:
                account = pwd.getpwnam(run_as)
                os.chown(root, account.pw_uid, account.pw_gid)
            cluster._init_primary(fsync=fsync)
            for database in databases:
                cluster.execute(f'CREATE DATABASE "{database}"')
            cluster.databases = list(databases)
            cluster._add_standby(cluster.nodes[1])
        except BaseException:
            cluster.close()
            raise
        return cluster

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:  # closed whatever the exception
        self.close()

    @property
    def standby(self) -> Node:
        """The node that is not the primary."""
        return next(node for node in self.nodes if node is not self.primary)

    def url(
        self,
        database: str = "halfmq",
        *,
        driver: str = "postgresql+psycopg",
        password: str | None = None,
    ) -> str:
        """The multi-host URL brokers use: libpq tries each node in turn and keeps the one that
        takes writes (``target_session_attrs=read-write``), so the URL outlives a failover.
        SQLAlchemy's form is one ``host=addr:port`` parameter per node (``host=a:p,b:q`` is
        taken as one host name).  ``password``: written into the URL (loopback is trusted, the
        servers never ask for it)."""
        hosts = "&".join(f"host=127.0.0.1:{node.port}" for node in self.nodes)
        user = SUPERUSER if password is None else f"{SUPERUSER}:{quote(password, safe='')}"
        return f"{driver}://{user}@/{database}?{hosts}&target_session_attrs=read-write"

    def _init_primary(self, *, fsync: bool) -> None:
        node = self.primary
        self._run(
            PG_BIN / "initdb", "-D", str(node.data), "-U", SUPERUSER, "--auth=trust",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        conf = _CONF.format(sockets=self.root)
        if not fsync:
            conf += "fsync = off\n"
        with (node.data / "postgresql.conf").open("a") as file:
            file.write(conf)
        with (node.data / "pg_hba.conf").open("a") as file:
            file.write("host replication all 127.0.0.1/32 trust\n")
        self._start(node)

    def _add_standby(self, node: Node) -> None:
        """``node`` (its directory emptied) as a streaming standby of the primary, then required
        to confirm every commit (it is the synchronous standby)."""
        if node.data.exists():
            shutil.rmtree(node.data)
        self._run(
            PG_BIN / "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port),
            "-U", SUPERUSER, "-D", str(node.data), "-R", "-X", "stream", "-c", "fast",
            "--no-sync",
        )  # fmt: skip
        self._start(node)
        self._wait(lambda: self._streaming(node.name), f"{node.name} to stream from the primary")
        self.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        self.execute("SELECT pg_reload_conf()")
        self._wait(lambda: self._sync_state(node.name) == "sync", f"{node.name} to be synchronous")

    def _start(self, node: Node) -> None:
        # The node's own port and name on the command line: a base backup copies the config.
        options = f"-p {node.port} -c cluster_name={node.name}"
        self._run(
            PG_BIN / "pg_ctl", "-D", str(node.data), "-l", str(node.log), "-o", options,
            "-w", "-t", str(int(_WAIT_SECONDS)), "start",
        )  # fmt: skip

    # -- failing over ---------------------------------------------------------------------------

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and every backend it forked (its process group:
        ``pg_ctl`` starts the postmaster in a session of its own), as a machine that died."""
        pid = self.primary.pid
        if pid is None:
            raise ClusterError(f"{self.primary.name} is not running")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self._wait(lambda: not _alive(pid), f"{self.primary.name} (pid {pid}) to die")

    def promote(self, *, alone: bool = True) -> Node:
        """Promote the standby (``pg_ctl promote``) and make it the primary.  ``alone``: it has no
        standby of its own yet, so it stops waiting for one (``synchronous_standby_names = ''``,
        what Patroni does outside strict synchronous mode); otherwise every commit on it would wait
        until :meth:`rebuild_standby`."""
        node = self.standby
        self._run(
            PG_BIN / "pg_ctl", "-D", str(node.data), "-w", "-t", str(int(_WAIT_SECONDS)),
            "promote",
        )  # fmt: skip
        self.primary = node
        self._wait(lambda: self._writable(node), f"{node.name} to take writes")
        if alone:
            self.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
            self.execute("SELECT pg_reload_conf()")
        return node

    def rebuild_standby(self) -> Node:
        """The node that is not the primary (stopped, or killed), rebuilt from the primary with
        ``pg_basebackup`` on its own port and made the synchronous standby."""
        node = self.standby
        self._stop(node)
        self._add_standby(node)
        return node

    # -- reading --------------------------------------------------------------------------------

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """Run ``sql`` on the primary (autocommit), returning its rows if any."""
        with psycopg.connect(self.primary.dsn(database), autocommit=True, connect_timeout=5) as c:
            cursor = c.execute(sql.encode())
            return list(cursor.fetchall()) if cursor.description is not None else []

    def _streaming(self, name: str) -> bool:
        rows = self.execute(
            f"SELECT 1 FROM pg_stat_replication WHERE application_name = '{name}' "
            "AND state = 'streaming'"
        )
        return bool(rows)

    def _sync_state(self, name: str) -> str | None:
        rows = self.execute(
            f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{name}'"
        )
        return str(rows[0][0]) if rows else None

    @staticmethod
    def _writable(node: Node) -> bool:
        try:
            with psycopg.connect(node.dsn(), autocommit=True, connect_timeout=2) as conn:
                row = conn.execute(b"SELECT pg_is_in_recovery()").fetchone()
        except psycopg.Error:
            return False
        return row is not None and row[0] is False

    # -- stopping -------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every node (immediate shutdown, then SIGKILL of its process group) and remove
        the directory.  Safe to call twice, and on a half-built cluster."""
        for node in self.nodes:
            self._stop(node)
        shutil.rmtree(self.root, ignore_errors=True)

    def _stop(self, node: Node) -> None:
        pid = node.pid
        if pid is None or not _alive(pid):
            return
        with contextlib.suppress(ClusterError):
            self._run(PG_BIN / "pg_ctl", "-D", str(node.data), "-m", "immediate", "-w", "stop")
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ClusterError):
                self._wait(lambda: not _alive(pid), f"{node.name} to stop")

    # -- helpers --------------------------------------------------------------------------------

    def _run(self, *argv: str | Path) -> None:
        """Run a PostgreSQL tool (as the unprivileged user when root), bounded; its output goes
        into the error when it fails."""
        command = [str(part) for part in argv]
        if self.run_as is not None:
            command = [
                "setpriv", f"--reuid={self.run_as}", f"--regid={self.run_as}", "--init-groups",
                "--reset-env", "--", *command,
            ]  # fmt: skip
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                timeout=_WAIT_SECONDS + 30,
                cwd=self.root,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{argv[0]} did not finish in {exc.timeout}s") from exc
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise ClusterError(f"{Path(argv[0]).name} failed ({done.returncode}): {output}")

    @staticmethod
    def _wait(predicate: Callable[[], bool], what: str, timeout: float = _WAIT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise ClusterError(f"timed out after {timeout}s waiting for {what}")


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: ``pg_ctl``'s children are reaped by
    whoever started them, here init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"
