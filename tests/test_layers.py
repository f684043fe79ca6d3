"""The floor plan, enforced: imports point one way and no two modules import each other.

Read from the source (every import statement: at the top, inside functions, and under
TYPE_CHECKING, which is a design dependency even when it costs nothing at run time), so a
wrong-way import fails here whatever path loads it.

    core          leaf
    launch        core                         (how a sandbox's server starts: both sides' contract)
    web           core                         (the web kit of both services)
    events        core                         (SPEC 6, the tools' payloads included)
    tools         core, events                 (what runs the payloads)
    agent_server  core, launch, web, tools, events
    control_plane core, launch, web, events    never agent_server
    bridge        core, web, events            a client of the services' HTTP APIs
    cli           agent_server, bridge         the `agent-server` command; nothing imports it
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from launch.env import PREFIX

ROOT = Path(__file__).resolve().parent.parent
#: Packages, and top-level modules (`cli.py`).
PACKAGES = (
    "core",
    "launch",
    "web",
    "events",
    "tools",
    "agent_server",
    "control_plane",
    "bridge",
    "cli",
)
#: Package -> the project packages it may import (besides itself).
ALLOWED = {
    "core": set(),
    "launch": {"core"},
    "web": {"core"},
    "events": {"core"},
    "tools": {"core", "events"},
    "agent_server": {"core", "launch", "web", "tools", "events"},
    "control_plane": {"core", "launch", "web", "events"},
    "bridge": {"core", "web", "events"},
    "cli": {"agent_server", "bridge"},
}
#: What a leaf may import from outside the project (besides the standard library).
LEAF_THIRD_PARTY = {"core": {"pydantic", "ulid"}, "launch": {"pydantic"}}
#: Lines a module may have, as `ruff format` lays it out (checked in `make test`): one
#: concept, readable whole. A measure of the code, not a target: a module is split where a
#: concept separates, and one that is one concept past it says why below.
MAX_LINES = 500
#: Modules allowed over it for now, with the reason.
LONG: dict[str, str] = {}
#: Inside agent_server, what a layer never imports (the layers above it).
AGENT_LAYERS = {
    "agent_server.agent": (
        "agent_server.conversations",
        "agent_server.api",
        "agent_server.app",
        "agent_server.services",
    ),
    "agent_server.delivery": (
        "agent_server.conversations",
        "agent_server.agent",
        "agent_server.api",
        "agent_server.app",
        "agent_server.services",
    ),
    "agent_server.telemetry": (
        "agent_server.conversations",
        "agent_server.agent",
        "agent_server.api",
        "agent_server.app",
        "agent_server.services",
    ),
    "agent_server.conversations": ("agent_server.api", "agent_server.app", "agent_server.services"),
    "agent_server.api": ("agent_server.app",),
    "agent_server.services": ("agent_server.api", "agent_server.app"),
}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        if (ROOT / f"{package}.py").is_file():
            found[package] = ROOT / f"{package}.py"
            continue
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The project modules `name` imports (a `from a import b` of a submodule counts as b)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"
                else:
                    yield from _known(base, known)


def _known(name: str, known: set[str]) -> Iterator[str]:
    while name and name not in known:
        name = name.rpartition(".")[0]
    if name:
        yield name


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: set(imports(name, path, known)) - {name} for name, path in found.items()}


def test_packages_import_only_the_floors_below_them() -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        for target in targets
        if target.split(".")[0] != module.split(".")[0]
        and target.split(".")[0] not in ALLOWED[module.split(".")[0]]
    )
    assert wrong == []


def test_the_command_stands_above_both_programs() -> None:
    """`agent-server` (cli.py) hands `acp` to the bridge and the rest to the server; the
    server never imports the bridge, and nothing imports the command."""
    users = sorted(module for module, targets in graph().items() if "cli" in targets)
    assert users == []
    assert graph()["cli"] == {"agent_server.__main__", "bridge.cli"}


def test_the_leaves_import_nothing_else() -> None:
    """core and launch ship in the sandbox image and under the control plane alike: of the
    world, the standard library and pydantic (core: python-ulid too)."""
    project = set(PACKAGES)
    wrong = sorted(
        f"{name} -> {top}"
        for name, path in modules().items()
        if name.split(".")[0] in LEAF_THIRD_PARTY
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and not (isinstance(node, ast.ImportFrom) and node.level)
        for top in {
            (a.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            for a in node.names
        }
        if top not in sys.stdlib_module_names
        and top not in project
        and top not in LEAF_THIRD_PARTY[name.split(".")[0]]
    )
    assert wrong == []


def test_the_control_plane_names_no_agent_server_variable() -> None:
    """The variables a sandbox's server is launched with are built by `launch` (the names the
    agent server's configuration reads): no control plane module spells one in its code."""
    wrong = []
    for name, path in modules().items():
        if not name.startswith("control_plane"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        wrong += [
            f"{name}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and PREFIX in node.value
            and id(node) not in docstrings
        ]
    assert wrong == []


def test_no_module_is_longer_than_one_concept_needs() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert set(long) <= set(LONG), long


def test_the_network_boundary_stands_alone() -> None:
    """control_plane.network ships in the sandbox image (a swarm node's fence runs from it):
    of the project it imports core and itself, nothing else of the control plane."""
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module.startswith("control_plane.network")
        for target in targets
        if not target.startswith(("control_plane.network", "core"))
    )
    assert wrong == []


def test_the_seccomp_filter_is_built_in_one_place() -> None:
    """libseccomp's bindings are the control plane's alone (one module builds the filter); the
    agent server, which also runs where they are not installed (the sandbox image), loads the
    program it is handed (`core.namespaces.confine`)."""
    users = sorted(
        name
        for name, path in modules().items()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            == "pyseccomp"
            for alias in node.names
        )
    )
    assert users == ["control_plane.providers.process.seccomp"]


def test_the_agent_servers_layers_point_down() -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        for layer, above in AGENT_LAYERS.items()
        if module == layer or module.startswith(layer + ".")
        for target in targets
        if target.startswith(above)
    )
    assert wrong == []


def test_no_two_modules_import_each_other_even_through_others() -> None:
    """No cycle in the module graph (Tarjan's strongly connected components)."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        # Iterative, so a deep graph cannot exhaust the recursion limit.
        work = [(node, iter(sorted(edges[node])))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[current] = min(low[current], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[current])
            if low[current] == index[current]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == current:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert cycles == []


def test_the_checker_sees_a_wrong_way_import(tmp_path: Path) -> None:
    """The graph is what the files say: a module's own import is found, relative ones too."""
    found = modules()
    known = set(found)
    app = set(imports("agent_server.app", found["agent_server.app"], known))
    assert "agent_server.services" in app
    source = tmp_path / "probe.py"
    source.write_text("from ..conversations import Conversation\nimport control_plane.app\n")
    assert set(imports("agent_server.api.probe", source, known)) == {
        "agent_server.conversations",
        "control_plane.app",
    }


#: Names of the wire contract that one module defines for every service and client.
ONE_DEFINITION = {
    "ExecutionStatus": "events.status",
    "TRANSITIONS": "events.status",
    "RESTING": "events.status",
}


def test_the_wire_vocabulary_is_defined_once() -> None:
    """The execution status, its moves and its resting set: one definition (`events.status`),
    which the agent server, the control plane and the bridge import (four copies before)."""
    found: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text(), str(path)).body:
            targets = (
                [node.name]
                if isinstance(node, ast.ClassDef)
                else [t.id for t in node.targets if isinstance(t, ast.Name)]
                if isinstance(node, ast.Assign)
                else [node.target.id]
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                else []
            )
            for target in targets:
                if target in ONE_DEFINITION:
                    found.setdefault(target, []).append(name)
    assert found == {k: [v] for k, v in ONE_DEFINITION.items()}


def test_routes_reach_the_store_through_services() -> None:
    """A route reads its input, calls a service and answers: what is stored, and how, is the
    services' (`control_plane.api` never imports `control_plane.store`)."""
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module.startswith("control_plane.api")
        for target in targets
        if target.startswith("control_plane.store")
    )
    assert wrong == []


#: Modules outside the sandboxes package that still read sandbox rows from the store, and why;
#: everything else finds a sandbox through `SandboxService` or its `SandboxRows`.
SANDBOX_ROW_READERS = {
    "control_plane.lifecycle": "the reconciler's rounds claim sandboxes in bulk",
}


def test_sandbox_rows_are_reached_through_the_sandbox_domain() -> None:
    readers = {
        module
        for module, targets in graph().items()
        if "control_plane.store.sandboxes" in targets
        and not module.startswith(("control_plane.sandboxes", "control_plane.store"))
    }
    assert readers == set(SANDBOX_ROW_READERS)
    # The start's background walk and the routes find sandboxes through the service.
    assert "control_plane.store.sandboxes" not in graph()["control_plane.start_tasks"]


#: The kinds of sandbox, each a wing of `control_plane.providers`; what the container kinds
#: share (`containers`, `parking`, `pool`) stands beside them.
KINDS = ("process", "docker", "swarm")


def test_no_provider_imports_another_kind() -> None:
    """Each kind is read alone: its modules import the seam, the shared container helpers and
    their own wing, never another kind's."""
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        for kind in KINDS
        if module.startswith(f"control_plane.providers.{kind}")
        for target in targets
        if any(
            target.startswith(f"control_plane.providers.{other}")
            for other in KINDS
            if other != kind
        )
    )
    assert wrong == []
    # The container kinds share helpers; the process kind needs none of them. Every kind may
    # offer its parking (`parking`), none reaches into the pool that wraps it.
    assert not [
        t
        for m, ts in graph().items()
        if m.startswith("control_plane.providers.process")
        for t in ts
        if t.startswith(("control_plane.providers.containers", "control_plane.providers.pool"))
    ]
    assert not [
        f"{m} -> {t}"
        for m, ts in graph().items()
        if m.startswith(tuple(f"control_plane.providers.{kind}" for kind in KINDS))
        for t in ts
        if t.startswith("control_plane.providers.pool")
    ]


def test_the_warm_pool_wraps_a_provider_that_never_holds_it() -> None:
    """`providers.pool.Pooled` wraps any provider that offers the parking (`providers.parking`):
    only the composition root puts a provider in a pool, and the pool and the parking seam
    know no kind."""
    graph_ = graph()
    holders = sorted(
        m
        for m, ts in graph_.items()
        if "control_plane.providers.pool" in ts and m != "control_plane.providers.pool"
    )
    assert holders == ["control_plane.services"], holders
    for shared in ("control_plane.providers.pool", "control_plane.providers.parking"):
        assert not [
            t
            for t in graph_[shared]
            if t.startswith(
                (
                    *(f"control_plane.providers.{kind}" for kind in KINDS),
                    "control_plane.providers.containers",
                )
            )
        ], shared


def test_the_sandbox_domain_knows_only_the_seam() -> None:
    """`control_plane.sandboxes` (the service, starts, rows, drift, notices, capacity, fences,
    egress) never imports a provider kind; only the composition root picks one."""
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module.startswith("control_plane.")
        and not module.startswith(
            (
                "control_plane.providers",
                "control_plane.services",
                "control_plane.app",
                "control_plane.__main__",
            )
        )
        for target in targets
        if target.startswith("control_plane.providers")
    )
    assert wrong == []


def _importers(top: str) -> list[str]:
    """The project's modules importing the third-party package `top`."""
    return sorted(
        name
        for name, path in modules().items()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and not (isinstance(node, ast.ImportFrom) and node.level)
        and any(
            (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0] == top
            for alias in ([node] if isinstance(node, ast.ImportFrom) else node.names)
        )
    )


def test_the_control_plane_reports_through_its_telemetry() -> None:
    """OpenTelemetry and prometheus-client are the telemetry packages' (`web.telemetry`, each
    service's own): the control plane's services report through `control_plane.telemetry`,
    never to a global of either library."""
    for library in ("opentelemetry", "prometheus_client"):
        users = [u for u in _importers(library) if u.startswith("control_plane")]
        assert users and all(u.startswith("control_plane.telemetry") for u in users), users


def test_only_the_providers_speak_to_docker() -> None:
    users = sorted(
        name
        for name, path in modules().items()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and not (isinstance(node, ast.ImportFrom) and node.level)
        and any(
            (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            == "docker"
            for alias in node.names
        )
    )
    assert users and all(
        u.startswith(
            (
                "control_plane.providers.containers",
                "control_plane.providers.docker",
                "control_plane.providers.swarm",
            )
        )
        for u in users
    ), users


def test_a_swarm_service_spec_is_built_apart_from_the_calls_that_send_it() -> None:
    """`providers.swarm.spec` builds and parses the JSON (pure: no client, no call); the calls
    on the manager are `providers.swarm.manager`'s, and the provider strings them into a
    sandbox's life without an Engine API call of its own."""
    source = (ROOT / "control_plane/providers/swarm/spec.py").read_text()
    assert "DockerClient" not in source and "docker.errors" not in source
    spec = graph()["control_plane.providers.swarm.spec"]
    assert "control_plane.providers.swarm.manager" not in spec
    assert "api(" not in (ROOT / "control_plane/providers/swarm/provider.py").read_text()


def test_the_control_plane_branches_on_its_provider_in_one_place() -> None:
    """Which kind of sandbox there is matters to the configuration's checks and to the
    composition root that builds the provider; everything else asks the provider (the seam's
    attributes, such as `host_loopback`)."""
    branching = sorted(
        name
        for name, path in modules().items()
        if name.startswith("control_plane") and "sandbox_provider ==" in path.read_text()
    )
    assert branching == ["control_plane.config", "control_plane.services"]


def test_every_kind_waits_for_a_sandbox_with_the_one_loop() -> None:
    """A sandbox coming up is waited for by `sandboxes.provider.until_up` (a kind gives its
    probe), not by a loop of each kind's own: every wing uses it."""
    for kind in KINDS:
        wing = [
            path
            for name, path in modules().items()
            if name.startswith(f"control_plane.providers.{kind}")
        ]
        assert any("until_up(" in path.read_text() for path in wing), kind


#: Test directories that stand for no package of the project: the OpenHands SDK's own clients
#: run against the server (`compat`).
TESTS_OF_NO_PACKAGE = {"compat"}
#: Test modules at the top of tests/: the floor plan itself and the documents' links.
TOP_TESTS = {"test_layers.py", "test_docs.py"}


def test_the_tests_mirror_the_packages() -> None:
    """A test module sits in the directory of what it tests (`tests/control_plane/sandboxes`
    for `control_plane/sandboxes/`, `tests/control_plane/console` for `control_plane/
    console.py`), so the tests of a package are found, and moved, with it."""
    tests = ROOT / "tests"
    stray = []
    for path in sorted(tests.rglob("test_*.py")):
        where = path.parent.relative_to(tests)
        if where == Path("."):
            if path.name not in TOP_TESTS:
                stray.append(str(path.relative_to(ROOT)))
            continue
        if where.parts[0] in TESTS_OF_NO_PACKAGE or where.parts[0] in ("golden", "support"):
            continue
        if not ((ROOT / where).is_dir() or (ROOT / where).with_suffix(".py").is_file()):
            stray.append(str(path.relative_to(ROOT)))
    assert stray == []


def test_the_audit_log_is_written_in_one_place_and_only_appended() -> None:
    """`control_plane.store.audit` is the one module that names the audit log's table, and it
    has no statement that changes or removes a row (the database refuses both anyway:
    migration 0009's triggers); everything else records through `control_plane.audit`."""
    naming = sorted(
        name
        for name, path in modules().items()
        if name.startswith("control_plane")
        and ".migrations." not in name
        and name != "control_plane.store.tables"
        and "audit_log" in path.read_text()
    )
    assert naming == ["control_plane.store.audit"], naming
    tree = ast.parse((ROOT / "control_plane/store/audit.py").read_text())
    called = {
        node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    assert not called & {"update", "delete"}, called
