"""The client alone: ``pip install halfmq`` (no extra) in a throwaway virtualenv, then the README's
first producer and consumer against a broker of this checkout.

``python -m drills.client_only`` (``make client-check``; ``.ci/run`` runs it after the suite):

1. a fresh virtualenv (its own temporary directory) gets this checkout installed without extras,
   as a service that only produces and consumes installs it;
2. it must hold none of the broker's libraries (FastAPI, uvicorn, Alembic, psycopg, Jinja2,
   gRPC, pydantic-settings), and ``import framework`` must work in it;
3. a broker of this checkout's own environment starts on 127.0.0.1 (:class:`BrokerProcess`, a
   temporary SQLite file), and the README's "Sync, automatic check mode" example runs in the
   client's virtualenv against it: the half is committed and the consumer receives it.

Prints one line per step and exits 0, or says which step failed and exits 1.  The broker is
stopped by PID and the directory removed, whatever happens.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from drills.pg_cluster import free_port
from halfmq.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[1]
# The broker extra's libraries (pyproject.toml): none may come with the client alone.
BROKER_LIBRARIES = (
    "fastapi",
    "uvicorn",
    "alembic",
    "psycopg",
    "jinja2",
    "grpc",
    "pydantic_settings",
)
EXAMPLE_HEADING = "**Sync, automatic check mode (no check code) and a consumer**"
CHECK = """
import importlib.util, framework
present = [name for name in {names!r} if importlib.util.find_spec(name) is not None]
assert not present, f"the client alone installed the broker's {{present}}"
print("framework imports from", framework.__file__)
"""


def readme_example() -> str:
    """The README's sync example (the first Python block after its heading), and a check that
    its transaction was committed."""
    readme = (ROOT / "README.md").read_text()
    after = readme[readme.index(EXAMPLE_HEADING) :]
    found = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    if found is None:
        raise SystemExit(f"README.md: no Python block after {EXAMPLE_HEADING}")
    return found[1] + '\nassert result.resolution == "COMMITTED", result\n'


def run(step: str, command: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    print(f"== {step}", flush=True)
    done = subprocess.run(command, cwd=cwd, env=env, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"client-only check failed at: {step} (exit {done.returncode})")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="halfmq-client-") as tmp:
        work = Path(tmp)
        python = work / "venv" / "bin" / "python"
        run("a fresh virtualenv", [sys.executable, "-m", "venv", str(work / "venv")], work)
        run(
            "pip install <checkout> (no extra)",
            [str(python), "-m", "pip", "install", "-q", str(ROOT)],
            work,
        )
        run("the client alone", [str(python), "-c", CHECK.format(names=BROKER_LIBRARIES)], work)
        (work / "example.py").write_text(readme_example())
        broker = BrokerProcess(f"sqlite:///{work / 'broker.db'}", free_port(), work / "broker.log")
        broker.start()
        try:
            env = {"HALFMQ_BROKER": broker.url, "PATH": str(python.parent)}
            run(
                f"the README's producer and consumer against {broker.url}",
                [str(python), "example.py"],
                work,
                env,
            )
        finally:
            broker.stop()
    print("== the client alone installs, imports and runs against a broker")


if __name__ == "__main__":
    main()
