"""docs/architecture.md's import rules, checked on the source: imports only run downwards.

Every ``import`` and ``from ... import`` of every module is read with ``ast`` -- at module level,
inside functions and under ``if TYPE_CHECKING`` alike: a lazy import is still an arrow.  Then:

1. the parts of the house import only the parts below them;
2. the rooms of ``broker_service`` import only the rooms their row of the table allows, and
   none of the libraries it forbids them;
3. the domain's own parts (shared modules, records, ports, concepts) keep their order;
4. no circle anywhere: between parts, between rooms, between the domain's parts, between modules.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# -- 1. the parts -------------------------------------------------------------------------------

PARTS: dict[str, set[str]] = {
    "framework": set(),
    "broker_service": set(),
    "spark_reconcile": {"broker_service"},
    "demo_bank": {"framework", "broker_service"},
    "migrations": {"broker_service"},
    "halfmq": {"framework", "broker_service", "demo_bank", "spark_reconcile"},
}
# tests/ and bench/ may import every part; nothing but halfmq imports halfmq.

# -- 2. the rooms of the broker -----------------------------------------------------------------

ROOMS: dict[str, set[str]] = {
    "domain": set(),
    "acl": {"domain"},
    "settings": {"domain"},
    "logs": {"domain"},
    "metrics": set(),
    "store": {"domain", "acl", "settings"},
    "schedulers": {"domain", "acl", "settings", "logs", "metrics"},
    "api": {"domain", "acl", "settings", "logs", "metrics"},
    "console": {"domain", "acl", "settings", "logs", "metrics", "api"},
    "grpc": {"domain", "acl", "settings", "logs", "metrics"},
    "app": {
        "domain",
        "acl",
        "settings",
        "logs",
        "metrics",
        "store",
        "schedulers",
        "api",
        "console",
        "grpc",
    },
}
IO_LIBRARIES = {"fastapi", "starlette", "sqlalchemy", "httpx", "uvicorn", "psycopg", "sqlite3"}
NEVER: dict[str, set[str]] = {
    "domain": IO_LIBRARIES | {"pydantic_settings", "alembic", "anyio"},
    "acl": {"fastapi", "starlette", "sqlalchemy"},
    "store": {"fastapi", "starlette"},
    "console": {"sqlalchemy"},
    "grpc": IO_LIBRARIES | {"anyio"},  # RocketMQ's protocol over the domain: no HTTP, no SQL
}

# -- 3. the parts of the domain -----------------------------------------------------------------

SHARED = {"errors", "clock", "ids", "names", "config"}
CONCEPTS = ("messages", "transactions", "consumers", "retention", "audit", "brokers")
DOMAIN_PARTS: dict[str, set[str]] = {
    "shared": {"shared"},
    "records": {"shared", "records"},
    "ports": {"shared", "records", "ports"},
    "messages": {"shared", "records", "ports", "messages"},
    "transactions": {"shared", "records", "ports", "messages", "transactions"},
    "consumers": {"shared", "records", "ports", "messages", "consumers"},
    "retention": {"shared", "records", "ports", "retention"},
    "audit": {"shared", "records", "ports", "audit"},
    "brokers": {"shared", "records", "ports", "brokers"},
}


# -- reading the imports ------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources(*parts: str) -> list[Path]:
    found: list[Path] = []
    for part in parts:
        found += sorted((ROOT / part).rglob("*.py"))
    return found


@cache
def known_modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in sources(*PARTS))


def imports_in(source: str, module: str, is_package: bool) -> set[str]:
    """The modules ``source`` imports (absolute names; ``from a import b`` is ``a.b`` when that
    is a module, else ``a``)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known_modules() else base)
    return found


@cache
def graph() -> Mapping[str, frozenset[str]]:
    """Every module of the parts and what it imports."""
    edges = {}
    for path in sources(*PARTS):
        name = module_name(path)
        edges[name] = frozenset(imports_in(path.read_text(), name, path.name == "__init__.py"))
    return edges


def domain_node(name: str) -> str | None:
    """The domain's parts, finer: each shared module, and each concept's records, on its own."""
    part = domain_part(name)
    if part in ("shared", "records"):
        parts = name.split(".")
        return f"{part}:{parts[2] if len(parts) > 2 else '__init__'}"
    return part


Key = Callable[[str], str | None]  # a module to the node it belongs to (None: left out)


def top(name: str) -> str:
    return name.split(".")[0]


def room(name: str) -> str | None:
    """``broker_service.<room>...`` -> the room (``None`` for the package itself)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "broker_service" and len(parts) > 1 else None


def domain_part(name: str) -> str | None:
    parts = name.split(".")
    if parts[:2] != ["broker_service", "domain"]:
        return None
    if len(parts) == 2 or parts[2] in SHARED:
        return "shared"
    if parts[2] in CONCEPTS and parts[3:4] == ["model"]:
        return "records"
    return parts[2]  # ports, or a concept


def collapsed(key: Key) -> dict[str, set[str]]:
    """The module graph seen from higher up: ``key(module)`` names a node (None: left out)."""
    nodes: dict[str, set[str]] = {}
    for source, targets in graph().items():
        here = key(source)
        if here is None:
            continue
        for target in targets:
            there = key(target)
            if there is not None and there != here:
                nodes.setdefault(here, set()).add(there)
    return nodes


def circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def offending(rules: Mapping[str, set[str]], key: Key) -> list[str]:
    """Arrows from a node to one its rule does not allow: ``module -> import (node -> node)``."""
    wrong = []
    for source, targets in sorted(graph().items()):
        here = key(source)
        if here is None:
            continue
        for target in sorted(targets):
            there = key(target)
            if there is not None and there != here and there not in rules[here]:
                wrong.append(f"{source} -> {target} ({here} -> {there})")
    return wrong


# -- the rules ----------------------------------------------------------------------------------


def test_every_part_imports_only_the_parts_below_it() -> None:
    assert offending(PARTS, lambda m: top(m) if top(m) in PARTS else None) == []


def test_nothing_outside_tests_and_bench_imports_halfmq_but_halfmq() -> None:
    wrong = [
        f"{source} -> {target}"
        for source, targets in graph().items()
        for target in targets
        if top(target) == "halfmq" and top(source) != "halfmq"
    ]
    assert wrong == []


def test_every_room_of_the_broker_imports_only_the_rooms_its_row_allows() -> None:
    def key(module: str) -> str | None:
        found = room(module)
        if found is None and module == "broker_service":
            return "broker_service (the package)"  # allowed to no room: a room names its room
        return found

    rules = {**ROOMS, "broker_service (the package)": set()}
    assert set(ROOMS) >= {room(m) for m in graph() if room(m)}, "a room missing from the table"
    assert offending(rules, key) == []


def test_no_room_imports_a_library_its_row_forbids() -> None:
    wrong = [
        f"{source} imports {target}"
        for source, targets in sorted(graph().items())
        for target in sorted(targets)
        if top(target) in NEVER.get(room(source) or "", set())
    ]
    assert wrong == []


def test_the_domain_imports_no_io_library_nor_pydantic_settings() -> None:
    domain = [m for m in graph() if room(m) == "domain"]
    assert len(domain) > 20
    wrong = [f"{m} imports {t}" for m in domain for t in graph()[m] if top(t) in NEVER["domain"]]
    assert wrong == []


def test_the_domains_parts_keep_their_order() -> None:
    assert offending(DOMAIN_PARTS, domain_part) == []


def test_no_import_circles_between_parts_rooms_domain_parts_or_modules() -> None:
    parts = collapsed(lambda m: top(m) if top(m) in PARTS else None)
    rooms = collapsed(room)
    domain = collapsed(domain_node)
    modules = {m: set(t) & set(graph()) for m, t in graph().items()}
    assert (circles(parts), circles(rooms), circles(domain), circles(modules)) == ([], [], [], [])


def test_the_reader_sees_lazy_imports_and_resolves_submodules() -> None:
    source = (
        "from broker_service.domain import names\n"
        "from . import errors\n"
        "def later():\n"
        "    from broker_service.api.app import create_app\n"
        "    import broker_service.store.sqltx\n"
    )
    found = imports_in(source, "broker_service.domain.ids", is_package=False)
    assert found == {
        "broker_service.domain.names",
        "broker_service.domain.errors",
        "broker_service.api.app",
        "broker_service.store.sqltx",
    }
