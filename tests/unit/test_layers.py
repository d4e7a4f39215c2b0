"""docs/architecture.md's import rules, checked on the source: imports only run downwards.

Every ``import`` and ``from ... import`` of every module is read with ``ast`` -- at module level,
inside functions and under ``if TYPE_CHECKING`` alike: a lazy import is still an arrow.  Then:

1. the parts of the house import only the parts below them; the wire contract (``halfmq_wire``),
   at the bottom, imports the standard library only;
2. the rooms of ``broker_service`` import only the rooms their row of the table allows, and
   none of the libraries it forbids them;
3. the domain's own parts (shared modules, records, ports, concepts) keep their order;
4. no circle anywhere: between parts, between rooms, between the domain's parts, between modules;
5. no benchmark figure in a comment or docstring of the product code: figures live in
   bench/README.md, and a comment cites the section that holds them.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import tomllib
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# -- 1. the parts -------------------------------------------------------------------------------

WIRE = "halfmq_wire"  # the wire contract: both sides of it import it, it imports neither
PARTS: dict[str, set[str]] = {
    WIRE: set(),
    "framework": {WIRE},
    "broker_service": {WIRE},
    "spark_reconcile": {"broker_service", WIRE},
    "demo_bank": {"framework", "broker_service", WIRE},
    "migrations": {"broker_service", WIRE},
    "halfmq": {"framework", "broker_service", "demo_bank", "spark_reconcile", WIRE},
    "drills": {"framework", "broker_service", "demo_bank", "spark_reconcile", "halfmq", WIRE},
}
# tests/, bench/ and drills/ (run from the source tree, not in the wheel) may import every part;
# nothing else but halfmq imports halfmq.
MAY_IMPORT_HALFMQ = {"halfmq", "drills"}

# -- 2. the rooms of the broker -----------------------------------------------------------------

ROOMS: dict[str, set[str]] = {
    "domain": set(),
    "acl": {"domain"},
    "settings": {"domain"},
    "logs": {"domain"},
    "metrics": set(),
    "store": {"domain", "settings"},  # handed a nonce's key: it knows nothing of the ACL
    "memstore": {"domain"},
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
        "memstore",
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
    "memstore": IO_LIBRARIES | {"anyio", "pydantic_settings", "alembic"},  # the domain's, no I/O
    "console": {"sqlalchemy"},
    "grpc": IO_LIBRARIES | {"anyio"},  # RocketMQ's protocol over the domain: no HTTP, no SQL
}

# -- 3. the parts of the domain -----------------------------------------------------------------

SHARED = {"errors", "clock", "ids", "names", "config"}
CONCEPTS = ("messages", "transactions", "consumers", "retention", "audit", "brokers", "clients")
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
    "clients": {"shared", "records", "ports", "clients"},
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
        if top(target) == "halfmq" and top(source) not in MAY_IMPORT_HALFMQ
    ]
    assert wrong == []


def test_the_wire_contract_imports_the_standard_library_only() -> None:
    wire = [m for m in graph() if top(m) == WIRE]
    assert {f"{WIRE}.signature", f"{WIRE}.errors", f"{WIRE}.records"} <= set(wire)
    wrong = [
        f"{m} imports {t}"
        for m in sorted(wire)
        for t in sorted(graph()[m])
        if top(t) != WIRE and top(t) not in sys.stdlib_module_names and top(t) != "__future__"
    ]
    assert wrong == []


# Modules of the client that a service imports only with a library of its own: the FastAPI
# integration (a FastAPI service has FastAPI).  OpenTelemetry (the ``otel`` extra) is tried for,
# and Alembic imported where a service's own migration calls it.
CLIENT_INTEGRATIONS = {"framework.fastapi": {"fastapi", "starlette"}}


def loaded_imports(source: str) -> set[str]:
    """The top-level names a module needs when it is loaded: its module-level imports, in ``if``
    and ``try`` blocks too; left out: ``if TYPE_CHECKING`` blocks, function bodies, and a ``try``
    that catches ``ImportError`` (an optional library)."""
    found: set[str] = set()
    pending = list(ast.parse(source).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                pending += node.body + node.orelse
        elif isinstance(node, ast.Try):  # a library tried for, ImportError caught: optional
            optional = any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers
            )
            pending += ([] if optional else node.body) + node.orelse + node.finalbody
    return found


def test_the_client_loads_with_the_client_install_alone() -> None:
    """``pip install halfmq`` (no extra) is enough to import every module of the client and the
    wire contract: what they import when loaded is ours, the standard library's, or a library of
    ``[project] dependencies`` (the broker's are the ``broker`` extra's)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = {
        re.split(r"[\[<>=!~; ]", requirement)[0].lower().replace("-", "_")
        for requirement in project["dependencies"]
    }
    ours = {"framework", WIRE, "__future__"}
    wrong = []
    for path in sources("framework", WIRE):
        name = module_name(path)
        allowed = installed | ours | CLIENT_INTEGRATIONS.get(name, set())
        missing = sorted(
            lib
            for lib in loaded_imports(path.read_text())
            if lib not in allowed and lib not in sys.stdlib_module_names
        )
        wrong += [f"{name} imports {lib}" for lib in missing]
    assert wrong == []
    assert not installed & {"fastapi", "uvicorn", "alembic", "psycopg"}  # the broker extra's


def test_the_wheel_ships_every_part_but_the_drills() -> None:
    """drills/ runs from a checkout; migrations/ ships inside broker_service (force-include)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    wheel = tool["hatch"]["build"]["targets"]["wheel"]
    assert set(wheel["packages"]) == set(PARTS) - {"drills", "migrations"}
    assert wheel["force-include"] == {"migrations": "broker_service/_migrations"}


def test_both_sides_speak_the_wire_contract_and_neither_imports_the_other() -> None:
    """The signature, the error envelope and the shared records come from one place: the broker's
    verifier and the client's signer both import ``halfmq_wire``, and no module of one side
    imports the other."""
    users = {top(m) for m, targets in graph().items() for t in targets if top(t) == WIRE}
    assert {"framework", "broker_service"} <= users
    for side, other in (("framework", "broker_service"), ("broker_service", "framework")):
        crossing = [
            m
            for m, targets in graph().items()
            if top(m) == side
            for t in targets
            if top(t) == other
        ]
        assert crossing == [], f"{side} imports {other}"
    assert WIRE in {top(t) for t in graph()["broker_service.acl.signature"]}
    assert WIRE in {top(t) for t in graph()["framework.signing"]}


def test_every_room_of_the_broker_imports_only_the_rooms_its_row_allows() -> None:
    def key(module: str) -> str | None:
        found = room(module)
        if found is None and module == "broker_service":
            return "broker_service (the package)"  # allowed to no room: a room names its room
        return found

    rules = {**ROOMS, "broker_service (the package)": set()}
    assert set(ROOMS) >= {room(m) for m in graph() if room(m)}, "a room missing from the table"
    assert offending(rules, key) == []


def test_the_store_imports_nothing_of_the_acl_nor_of_the_api() -> None:
    """A signed request's nonce is a value the store is handed with a write (``nonce=``, the key
    to remember with the unit), not something it reads from the ACL or the request."""
    wrong = [
        f"{source} -> {target}"
        for source, targets in sorted(graph().items())
        if room(source) == "store"
        for target in sorted(targets)
        if room(target) in ("acl", "api")
    ]
    assert wrong == []


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


PORT_METHODS_MAX = 20  # a role port a second backend can build and test in one sitting
PORTS_UNION = "StoreTx"  # the union of the roles that a unit of work receives: not a role


def port_methods(ports: Path) -> dict[str, set[str]]:
    """Every Protocol of the domain's ports and its methods (properties too), the ones it inherits
    from the other ports included."""
    own: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    for path in sorted(ports.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            names = [ast.unparse(base) for base in node.bases]
            if "Protocol" not in names:
                continue
            own[node.name] = {
                item.name
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            bases[node.name] = names

    def methods(name: str) -> set[str]:
        return own[name].union(*(methods(base) for base in bases[name] if base in own))

    return {name: methods(name) for name in own}


def test_no_port_of_the_store_has_more_than_twenty_methods() -> None:
    """The store's interface is split by role, and each role by aggregate: no port a backend
    implements (but the union a unit receives) has more than PORT_METHODS_MAX methods."""
    ports = port_methods(ROOT / "broker_service" / "domain" / "ports")
    assert {"Store", "MessageStore", PORTS_UNION} <= set(ports)
    too_wide = {
        name: len(methods)
        for name, methods in ports.items()
        if len(methods) > PORT_METHODS_MAX and name != PORTS_UNION
    }
    assert too_wide == {}


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


# -- 5. no benchmark figure in a comment --------------------------------------------------------

# The code whose comments and docstrings may hold no measured figure (the wheel's parts; drills
# and tests are not product code).
PRODUCT = ("broker_service", "framework", "halfmq", "halfmq_wire", "demo_bank", "spark_reconcile")
_N = r"\d[\d,]*(?:\.\d+)?"  # 5, 11,400, 0.33
_SPAN = rf"{_N}(?:\s*-\s*{_N})?"  # 749-816
_SHARE = r"(?:half|a third|two thirds|a quarter|three quarters|a fifth|a tenth)"
# The shapes a measurement takes; a setting's value (``30 s``, ``every 300 s``, ``(5 ms)``, a
# page count in MB) is none of them.
FIGURE = re.compile(
    "|".join(
        (
            rf"{_N}\s*(?:us|µs|ns)\b",  # a time below the millisecond: always measured
            rf"{_N}\s*-\s*{_N}\s*ms\b|\d\.\d+\s*ms\b",  # milliseconds as a range, or to a decimal
            rf"\b(?:about|took|takes|costs?|costing|spent)\s+{_SPAN}\s*ms\b",  # "about 30 ms"
            rf"{_SPAN}\s*(?:msg|messages|rows|requests|req|transactions|tx|sends|ops)?/s\b",  # rates
            rf"{_N}\s+instructions\b",  # a callgrind count
            # a share measured: a range, a change, or a share of the time (a plan's "3 %" is none)
            rf"{_N}\s*-\s*{_N}\s*%|\b(?:up|down|by|cost|costs|took|spent)\s+(?:about\s+)?{_N}\s*%",
            rf"{_N}\s*%\s+(?:of\s+)?(?:\S+\s+){{0,4}}?(?:time|CPU|samples|faster|slower|cheaper)\b",
            rf"{_SPAN}\s*(?:->|→)\s*{_SPAN}\s*(?:us|µs|ns|ms|%|MB|/s)",  # before -> after
            rf"\bfrom\s+{_SPAN}\s+to\s+{_SPAN}\s*(?:us|µs|ns|ms|%|MB|/s)",  # from X to Y
            rf"\b{_N}\s*x\s+(?:faster|slower|cheaper|quicker|fewer|more|less)\b",  # 3.5x cheaper
            r"\b(?:twice|(?:two|three|four|five|ten|\d+)\s+times)\s+"
            r"(?:as\s+(?:fast|slow|cheap|much)|faster|slower|cheaper|quicker|dearer)\b",
            rf"\b{_SHARE}\s+of\s+(?:\S+\s+){{0,4}}?(?:time|CPU|cost|samples)\b",  # of the writer's time
            rf"\bRSS\b[^.]{{0,30}}?{_N}\s*[KMG]i?B\b|{_N}\s*[KMG]i?B\s+of\s+RSS\b",  # memory measured
        )
    ),
    re.IGNORECASE,
)


def prose_of(source: str) -> Iterable[tuple[int, str]]:
    """``(first line, text)`` of every comment block (consecutive ``#`` lines, joined) and every
    docstring of a module, its classes and functions, whitespace folded: a figure may span lines."""
    block: list[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line, text = token.start[0], token.string.lstrip("#").strip()
        if not token.line.lstrip().startswith("#"):  # a comment after code: a block of its own
            yield line, text
            continue
        if block and line != last + 1:
            yield start, " ".join(block)
            block = []
        if not block:
            start = line
        block.append(text)
        last = line
    if block:
        yield start, " ".join(block)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, " ".join(doc.split())


def figures_in(source: str) -> list[tuple[int, str]]:
    return [
        (line, match.group(0)) for line, text in prose_of(source) for match in FIGURE.finditer(text)
    ]


def test_no_comment_or_docstring_of_the_product_holds_a_benchmark_figure() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {figure!r}"
        for path in sources(*PRODUCT)
        for line, figure in figures_in(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "benchmark figures belong in bench/README.md; say what and why, and cite its section "
        '(measured: bench/README.md, "..."):\n' + "\n".join(found)
    )


# Comments this repository held before their figures moved to bench/README.md, and the settings'
# values and counts its comments hold: the pattern must tell them apart.
MEASURED = (
    "took the event loop's CPU per transaction from 749-816 to 656-659 us",
    "the rate up 13-19 % in interleaved runs",
    "11,400 instructions a row, against 17,600 for the JSON form",
    "51,220 / 54,680 against 55,680 / 62,900 msg/s in interleaved runs",
    "0.33 against 0.94 us of validation per message",
    "this look costs 1.8 ms before BatchIn's 4.3 ms",
    "none of them ever becomes garbage: 40 -> 28 us of CPU",
    "64 MB took the broker's RSS to 183 MB after a million batch-sent messages",
    "at most 2048 pages a call (about 30 ms)",
    "Sends take about 1-20 ms: fine steps there",
    "per batch cost a quarter of the writer's time",
    "three such spans were a fifth of a batched transaction's client CPU",
    "executemany 235 rows/s, one multi-row statement 30,800 rows/s",
    "a third of the broker's time: 21 % the commit's fsync, 9 % the bulk inserts",
    "building a statement per call costs about three times as much as running it",
    "which was half of what a span cost a transaction",
    "immutable like frozen dataclasses, and three times cheaper to make",
    "purged-id records in one precompiled statement (3.5x cheaper a row)",
)
NOT_MEASURED = (
    "coarse ones up to a receive's long poll (30 s)",
    "waits for the switch interval (5 ms) to get it back",
    "pages one compact gives back (8 MB of 4 KiB pages)",
    "``stop`` waits for each thread 30 s at most",
    "every check round (every 30 s by default)",
    "a receive of 32 messages, 4 times each",
    "the next starts at once with twice the share (up to all of it)",
    "bad names, bad values -> 400/422",
    "``10.0.0.0/8``, ``fd00::/8`` a CIDR network",
    "``max_message_bytes`` x 4/3 + 64 KiB",
    "once a quarter of the file is free, down to an eighth",
    "How long ago: 4s, 3m 20s, 2h 5m, 3d 4h; 500ms as seconds",
    "about 3 % overdraw; at 25 % of the run Bob is SIGKILLed",
    'a large share of the writer\'s time (bench/README.md, "Figures, second round")',
)


def test_the_figure_pattern_tells_a_measurement_from_a_setting() -> None:
    assert [text for text in MEASURED if not FIGURE.search(text)] == []
    assert [text for text in NOT_MEASURED if FIGURE.search(text)] == []


def test_a_figure_is_found_in_comment_blocks_and_docstrings_not_in_code() -> None:
    source = (
        '"""A module.  Measured:\n40 -> 28\nus of CPU."""\n'
        "TIMEOUT = 30  # seconds: 30 s default\n"
        "# the rate went up 13-19\n"
        "# % in interleaved runs\n"
        "def f():\n"
        '    """Cheaper (bench/README.md, "Figures, fifth round")."""\n'
        '    return "607 us"  # a string in code is not a comment\n'
    )
    assert figures_in(source) == [(5, "13-19 %"), (1, "40 -> 28 us")]
