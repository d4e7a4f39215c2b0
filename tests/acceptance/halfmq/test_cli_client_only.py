"""``halfmq`` in a client-only install (``pip install halfmq``, no ``[broker]`` extra): a command
that needs the broker says which extra to install, in one line, and exits 2 -- no traceback.

Each run is a real ``halfmq`` process whose interpreter cannot import the hidden modules
(``sys.modules[name] = None`` makes ``import name`` raise ModuleNotFoundError, as an absent
package does), then runs the CLI's ``main`` with the given arguments.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

BROKER_LINE = "pip install 'halfmq[broker]'"


def run_without(hidden: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import sys\n"
        f"for name in {hidden!r}:\n"
        "    sys.modules[name] = None\n"
        f"sys.argv = ['halfmq', *{list(args)!r}]\n"
        "from halfmq.cli import main\n"
        "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("hidden", "args"),
    [
        (["fastapi"], ("broker", "serve")),  # the app, imported when the command runs
        (["pydantic_settings"], ("broker", "serve")),  # the settings, imported with the command
        (["alembic"], ("db", "upgrade")),
    ],
)
def test_a_broker_command_without_the_broker_extra_says_what_to_install(
    hidden: list[str], args: tuple[str, ...]
) -> None:
    done = run_without(hidden, *args)

    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0] == (
        f"error: halfmq {args[0]} needs the broker ({hidden[0]} is not installed): {BROKER_LINE}"
    )
    assert "Traceback" not in done.stderr


def test_a_rest_command_runs_without_the_broker_extra() -> None:
    done = run_without(["fastapi", "uvicorn", "alembic", "pydantic_settings"], "topic", "--help")

    assert done.returncode == 0, done.stderr
    assert "Create, list, show and delete topics." in done.stdout


def test_a_missing_module_of_halfmq_itself_is_not_taken_for_a_missing_extra() -> None:
    done = run_without(["broker_service.settings"], "broker", "serve")

    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "ModuleNotFoundError" in done.stderr
    assert BROKER_LINE not in done.stderr
