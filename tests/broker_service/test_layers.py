"""The domain is free of the web framework and the database library (design.md's layering)."""

from __future__ import annotations

import ast
from pathlib import Path

import broker_service.domain

FORBIDDEN = ("fastapi", "starlette", "sqlalchemy", "httpx", "uvicorn", "psycopg", "sqlite3")


def test_the_domain_imports_neither_fastapi_nor_sqlalchemy() -> None:
    domain = Path(broker_service.domain.__file__).parent
    offenders = []
    for path in sorted(domain.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {name}" for name in names if name.split(".")[0] in FORBIDDEN
            ]
    assert offenders == []
