"""The demo's Java check runs ``java -version`` and wants 17 or newer: a ``java`` that merely
exists is not enough (macOS's ``/usr/bin/java`` stub exits 1 without a JDK; pyspark 4 starts no
Java 8 or 11).  Fake ``java`` scripts on the PATH (or in ``$JAVA_HOME/bin``) stand in for those
machines; the real Java 17 of this machine must still pass.  The demo itself, run as a process
with a fake Java, says what it found in its one ``note`` line and skips -- not fails -- the
reconciliation, with how to get Java."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from demo_bank import reconcile
from demo_bank.reconcile import (
    GET_JAVA,
    JAVA_MISSING,
    java_found,
    java_major,
    java_problem,
    run_reconcile,
    spark_missing,
)
from demo_bank.stores import Stores
from spark_reconcile.jdbc import JAR_DIR_ENV, JARS_ENV
from tests.acceptance.demo_bank.test_reconcile import (
    DEMO_TIMEOUT,
    JAVA,
    PACKAGE_MANAGERS,
    shadow_path,
)

JAVA_11 = """#!/bin/sh
echo 'openjdk version "11.0.22" 2024-01-16' >&2
echo 'OpenJDK Runtime Environment (build 11.0.22+7-post-Debian-1deb11u1)' >&2
echo 'OpenJDK 64-Bit Server VM (build 11.0.22+7-post-Debian-1deb11u1, mixed mode, sharing)' >&2
"""
JAVA_8 = """#!/bin/sh
echo 'java version "1.8.0_381"' >&2
echo 'Java(TM) SE Runtime Environment (build 1.8.0_381-b09)' >&2
"""
JAVA_21 = """#!/bin/sh
echo 'openjdk version "21" 2023-09-19' >&2
echo 'OpenJDK Runtime Environment (build 21+35-2513)' >&2
"""
# What macOS's /usr/bin/java prints, and its exit code, when no JDK is installed.
MACOS_STUB = """#!/bin/sh
echo "The operation couldn't be completed. Unable to locate a Java Runtime." >&2
echo "Please visit http://www.java.com for information on installing Java." >&2
exit 1
"""
NO_VERSION = """#!/bin/sh
echo 'Error: [warning] something else entirely' >&2
"""
HANGS = """#!/bin/sh
exec sleep 30
"""
PutJava = Callable[[str], Path]
STUB_SAID = '"The operation couldn\'t be completed. Unable to locate a Java Runtime."'


def fake_java(folder: Path, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    java = folder / "java"
    java.write_text(script)
    java.chmod(0o755)
    return java


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PutJava:
    """Puts a fake ``java`` first on the PATH (no JAVA_HOME) and returns its path."""
    monkeypatch.delenv("JAVA_HOME", raising=False)

    def put(script: str) -> Path:
        java = fake_java(tmp_path / "fake-bin", script)
        monkeypatch.setenv("PATH", f"{java.parent}{os.pathsep}{os.environ['PATH']}")
        assert shutil.which("java") == str(java)
        return java

    return put


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_381"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "11.0.22" 2024-01-16', 11),
        ('openjdk version "25-ea" 2025-09-16', 25),
        ("Unable to locate a Java Runtime.", None),
    ],
)
def test_java_major_reads_every_format(output: str, major: int | None) -> None:
    assert java_major(output) == major


def test_this_machines_java_17_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java on this machine")
    assert java_problem() is None
    assert java_found()


def test_java_11_is_too_old(on_path: PutJava) -> None:
    java = on_path(JAVA_11)
    assert java_problem() == f"Java 11 ({java}) is too old (Spark needs Java 17)"
    assert not java_found()


def test_java_8_is_too_old(on_path: PutJava) -> None:
    java = on_path(JAVA_8)
    assert java_problem() == f"Java 8 ({java}) is too old (Spark needs Java 17)"


def test_java_21_is_enough(on_path: PutJava) -> None:
    on_path(JAVA_21)
    assert java_problem() is None
    assert java_found()


def test_the_macos_stub_exists_but_fails(on_path: PutJava) -> None:
    java = on_path(MACOS_STUB)
    assert java_problem() == (
        f"`{java} -version` failed: exit code 1 {STUB_SAID} (Spark needs Java 17)"
    )
    assert not java_found()


def test_a_java_that_names_no_version_fails(on_path: PutJava) -> None:
    java = on_path(NO_VERSION)
    # Its brackets made round: the demo's console would take "[warning]" for markup.
    assert java_problem() == (
        f'`{java} -version` failed: no version in "Error: (warning) something else entirely" '
        "(Spark needs Java 17)"
    )


def test_a_java_that_hangs_is_given_up_on(
    on_path: PutJava,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    java = on_path(HANGS)
    monkeypatch.setattr(reconcile, "JAVA_VERSION_TIMEOUT", 0.5)
    assert java_problem() == f"`{java} -version` failed: no answer in 0.5 s (Spark needs Java 17)"


def test_no_java_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert java_problem() == JAVA_MISSING


def test_java_home_comes_before_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pyspark's launcher starts ``$JAVA_HOME/bin/java`` first: an old one there fails the check
    even with a good ``java`` on the PATH."""
    java = fake_java(tmp_path / "jdk11" / "bin", JAVA_11)
    fake_java(tmp_path / "fake-bin", JAVA_21)
    monkeypatch.setenv("PATH", f"{tmp_path / 'fake-bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    assert java_problem() == f"Java 11 ({java}) is too old (Spark needs Java 17)"


def test_an_old_java_skips_the_reconciliation_with_how_to_get_java(
    on_path: PutJava,
    tmp_path: Path,
) -> None:
    java = on_path(JAVA_11)
    stores = Stores(*(f"sqlite:///{tmp_path / role}.db" for role in ("broker", "bob", "smith")))
    outcome = run_reconcile(
        stores, tmp_path / "out", dt.datetime.now(dt.UTC).date(), tmp_path / "reconcile.log"
    )
    assert spark_missing() == f"Java 11 ({java}) is too old (Spark needs Java 17)"
    assert outcome.skipped
    assert not outcome.ran
    assert outcome.note == f"skipped: Java 11 ({java}) is too old (Spark needs Java 17)"
    assert outcome.hint == GET_JAVA
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("script", ["java-11", "macos-stub"])
def test_demo_with_an_unusable_java_says_what_it_found_and_skips(
    tmp_path: Path, script: str
) -> None:
    """``halfmq demo`` as a process with a fake ``java`` on its PATH (no JAVA_HOME): one ``note``
    line saying what was found, every invariant checked, the reconciliation skipped (not failed),
    how to get Java, exit 0."""
    path = shadow_path(tmp_path / "bin", PACKAGE_MANAGERS | JAVA)
    java = fake_java(tmp_path / "bin", JAVA_11 if script == "java-11" else MACOS_STUB)
    found = (
        f"Java 11 ({java}) is too old (Spark needs Java 17)"
        if script == "java-11"
        else f"`{java} -version` failed: exit code 1 {STUB_SAID} (Spark needs Java 17)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", JARS_ENV)}
    env |= {"PATH": path, JAR_DIR_ENV: str(tmp_path / "no-jars-here"), "COLUMNS": "400"}
    argv = [sys.executable, "-m", "halfmq", "demo", "--transfers", "20", "--no-faults"]
    argv += ["--concurrency", "4", "--settle-timeout", "60", "--dir", str(tmp_path / "run")]
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=DEMO_TIMEOUT, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    notes = [line for line in output.splitlines() if line.startswith("note ")]
    assert notes == [
        f"note {found}: the reconciliation will be skipped; "
        "everything else runs and every invariant is checked"
    ], output
    assert "FAIL" not in output, output
    assert f"reconciliation: skipped, not failed -- {found}" in output, output
    assert "apt install openjdk-17-jre-headless" in output, output
    assert "brew install openjdk@17" in output, output
    assert "every invariant holds · reconciliation skipped (not failed)" in output, output
    assert not (tmp_path / "run" / "reconcile").exists(), output
