"""The architecture as tests (STYLE.md, "Layout"): no import cycle among ``src/dpadmm`` modules, imports at the
top of modules, the layers' one-way imports, modules of a readable length.

Read from the source with :mod:`ast` (nothing is imported): every ``import`` / ``from … import`` statement, at a
module's top level *and* inside its functions, is an edge to the ``dpadmm`` module it names (``from pkg import
name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``). A package's ``__init__`` run implicitly
before its submodules is not an edge (Python imports a package before its children, whatever they import).
Names given to :func:`importlib.import_module` as strings are not edges: the protocol registry
(``dpadmm.protocol.registry.PROVIDERS``) is the one place that does it, because protocols register themselves.
"""

from __future__ import annotations

import ast
import collections
import functools
import pathlib


SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "dpadmm"

#: dpadmm imports inside functions outside cli/ — lower it when you hoist one; never raise it to hide a cycle
#: (an import inside a function is for a heavy optional library, with a comment saying so)
#: (229 before issue 25's rework; 0 after it)
MAX_FUNCTION_IMPORTS = 0
#: the same count without backends/ and engine.py
MAX_FUNCTION_IMPORTS_OUTSIDE_RUNTIME = 0

#: modules longer than 400 lines, with the length they may not exceed: split them by concern, then remove the entry
LONG_MODULES: dict[str, int] = {
}

#: import cycles known and owned elsewhere, to be removed by their owner (each entry names its cycle's modules)
KNOWN_CYCLES: list[frozenset] = []

#: module -> why it may break a layer rule for now (each entry names the move that removes it)
LAYER_EXCEPTIONS: dict[str, str] = {}


Module = collections.namedtuple("Module", "name path is_pkg tree lines")


def _modules() -> dict[str, Module]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        text = path.read_text()
        out[".".join(parts)] = Module(".".join(parts), path, is_pkg, ast.parse(text), text.count("\n") + 1)
    return out


MODULES = _modules()


def _base(mod: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    pkg = mod.name.split(".") if mod.is_pkg else mod.name.split(".")[:-1]
    pkg = pkg[: len(pkg) - (node.level - 1)]
    return ".".join(pkg + ([node.module] if node.module else []))


def _owner(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(mod: Module) -> list[tuple[str, int, bool]]:
    """``(target module, line, inside a function)`` for every dpadmm import of ``mod`` (read once per module)."""
    return _imports(mod.name)


@functools.lru_cache(maxsize=None)
def _imports(name: str) -> list[tuple[str, int, bool]]:
    return list(_walk_imports(MODULES[name]))


def _walk_imports(mod: Module):
    in_function = set()
    for fn in ast.walk(mod.tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.ImportFrom):
            base = _base(mod, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in dict.fromkeys(targets):
            owner = _owner(t) if t.split(".")[0] == "dpadmm" else None
            if owner is not None and owner != mod.name:
                yield owner, node.lineno, id(node) in in_function


def _graph() -> dict[str, set[str]]:
    return {m.name: {t for t, _, _ in imports(m)} for m in MODULES.values()}


def _cycles(graph: dict[str, set[str]]) -> list[frozenset]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop(); on.discard(w); comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _path(graph, comp) -> str:
    """One cycle through ``comp``, as ``a -> b -> … -> a`` (what a reader follows to break it)."""
    start = min(comp)
    prev, seen, frontier = {}, {start}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return " -> ".join(reversed(path)) + " -> " + start
                if w not in seen:
                    seen.add(w); prev[w] = v; nxt.append(w)
        frontier = nxt
    return ", ".join(sorted(comp))


# ----------------------------------------------------------------------------- (a) cycles
def test_no_import_cycle():
    graph = _graph()
    cycles = [c for c in _cycles(graph) if c not in KNOWN_CYCLES]
    assert not cycles, "import cycles (a concern without a home; move it where it belongs):\n" + "\n".join(
        _path(graph, c) for c in cycles)


def test_known_cycles_still_exist():
    """An entry of KNOWN_CYCLES that no longer is a cycle is stale: remove it (the list only shrinks)."""
    found = set(_cycles(_graph()))
    assert not [c for c in KNOWN_CYCLES if c not in found]


def test_the_cycle_check_finds_a_planted_cycle():
    graph = _graph()
    graph = {k: set(v) for k, v in graph.items()}
    graph["dpadmm.kernels.norms"].add("dpadmm.algorithms.vertical.party")  # party -> … -> kernels.norms exists
    cycles = _cycles(graph)
    assert any({"dpadmm.kernels.norms", "dpadmm.algorithms.vertical.party"} <= c for c in cycles)
    assert "dpadmm.kernels.norms" in _path(graph, next(c for c in cycles if "dpadmm.kernels.norms" in c))


# ----------------------------------------------------------------------------- (b) imports inside functions
def _function_imports(exclude=("dpadmm.cli",)):
    return [(m.name, line, t) for m in MODULES.values() if not m.name.startswith(exclude)
            for t, line, inner in imports(m) if inner]


def test_dpadmm_imports_inside_functions_do_not_grow():
    found = _function_imports()
    runtime = [f for f in found if not f[0].startswith(("dpadmm.backends", "dpadmm.engine"))]
    listing = "\n".join(f"{m}:{line} imports {t}" for m, line, t in sorted(found))
    assert len(found) <= MAX_FUNCTION_IMPORTS, (
        f"{len(found)} dpadmm imports inside functions outside cli/ (ceiling {MAX_FUNCTION_IMPORTS}); hoist them to "
        f"the module top (a cycle means a concern has no home yet):\n{listing}")
    assert len(runtime) <= MAX_FUNCTION_IMPORTS_OUTSIDE_RUNTIME, (
        f"{len(runtime)} outside cli/, backends/ and engine.py (ceiling {MAX_FUNCTION_IMPORTS_OUTSIDE_RUNTIME})")


# ----------------------------------------------------------------------------- (c) layers
#: package (prefix) -> prefixes it must not import
LAYERS = {
    "dpadmm.kernels": ("dpadmm.",),  # but the allowed ones below
    "dpadmm.data": ("dpadmm.algorithms", "dpadmm.backends", "dpadmm.estimators", "dpadmm.cli", "dpadmm.experiments",
                    "dpadmm.engine"),
    "dpadmm.privacy": ("dpadmm.algorithms", "dpadmm.backends", "dpadmm.estimators", "dpadmm.cli",
                       "dpadmm.experiments", "dpadmm.engine"),
    "dpadmm.protocol": ("dpadmm.algorithms", "dpadmm.backends", "dpadmm.estimators", "dpadmm.cli",
                        "dpadmm.experiments", "dpadmm.engine"),
    "dpadmm.algorithms": ("dpadmm.backends", "dpadmm.estimators", "dpadmm.cli", "dpadmm.experiments",
                          "dpadmm.engine", "dpadmm.runtime", "dpadmm.fit"),
    # a folder's driver (``algorithms/<alg>/driver*.py``) runs its protocol on a backend through the fit runner
    "dpadmm.algorithms.*.driver": ("dpadmm.estimators", "dpadmm.cli", "dpadmm.experiments"),
    # the party runtime sits below every backend (each hosts it) and above the algorithms it serves
    "dpadmm.runtime": ("dpadmm.backends", "dpadmm.estimators", "dpadmm.cli", "dpadmm.experiments", "dpadmm.fit"),
    # drivers run protocols on backends; estimators, the CLI and experiments call them
    "dpadmm.fit": ("dpadmm.estimators", "dpadmm.cli", "dpadmm.experiments"),
    # the jobs behind the commands: above the estimators, below the CLI and the reproductions
    "dpadmm.workflows": ("dpadmm.cli", "dpadmm.experiments"),
    # the reproductions and audit games may import anything but the CLI
    "dpadmm.experiments": ("dpadmm.cli",),
}
KERNELS_MAY_IMPORT = ("dpadmm.kernels", "dpadmm.exceptions", "dpadmm._core", "dpadmm._validation")
def _is_driver(name: str) -> bool:
    """``dpadmm.algorithms.<alg>.driver`` (or ``driver_*``): a folder's driver, above its protocol declaration."""
    parts = name.split(".")
    return len(parts) == 4 and parts[1] == "algorithms" and parts[3].startswith("driver")


def _layer(name: str) -> str:
    return "dpadmm.algorithms.*.driver" if _is_driver(name) else name


def _violations() -> list[str]:
    bad = []
    for m in MODULES.values():
        if m.name in LAYER_EXCEPTIONS:
            continue
        for t, line, _ in imports(m):
            where = f"{m.path.relative_to(SRC)}:{line} imports {t}"
            if t.startswith("dpadmm.experiments") and not m.name.startswith(("dpadmm.cli", "dpadmm.experiments")):
                bad.append(where + " (nothing but cli imports experiments)")
            if _is_driver(t) and not _is_driver(m.name) and m.name.startswith("dpadmm.algorithms"):
                bad.append(where + " (a folder's driver is on top of the algorithms: nothing there imports it)")
            layer = _layer(m.name)
            for pkg, forbidden in LAYERS.items():
                if layer == pkg or (not _is_driver(m.name) and layer.startswith(pkg + ".")):
                    if pkg == "dpadmm.kernels" and t.startswith(KERNELS_MAY_IMPORT):
                        continue
                    if t.startswith(forbidden):
                        bad.append(where)
    return bad


def test_layers_import_one_way():
    bad = _violations()
    assert not bad, "layering violated:\n" + "\n".join(bad)


def test_algorithm_folders_do_not_import_their_protocol_module():
    """``protocol.py`` and ``driver.py`` are on top of their folder: the folder's other modules never import them (the
    registry is filled by :mod:`dpadmm.algorithms`, which imports each folder's ``protocol.py``; the driver runs the
    protocol on a backend)."""
    bad = []
    for m in MODULES.values():
        parts = m.name.split(".")
        if len(parts) == 4 and parts[1] == "algorithms" and parts[3] != "protocol" and not _is_driver(m.name):
            own = ".".join(parts[:3]) + ".protocol"
            bad += [f"{m.name}:{line}" for t, line, _ in imports(m) if t == own]
    assert not bad, bad


# ----------------------------------------------------------------------------- (d) module length
def test_long_modules_do_not_grow():
    long = {str(m.path.relative_to(PKG)): m.lines for m in MODULES.values() if m.lines > 400}
    new = {k: v for k, v in long.items() if k not in LONG_MODULES}
    grown = {k: (v, LONG_MODULES[k]) for k, v in long.items() if k in LONG_MODULES and v > LONG_MODULES[k]}
    assert not new, f"modules over 400 lines: {new}; split them by concern (one concern per module)"
    assert not grown, f"listed long modules grew (lines, ceiling): {grown}; split them instead"


def test_long_module_list_is_current():
    """An entry of LONG_MODULES for a module now within 400 lines (or gone) is stale: remove it."""
    lengths = {str(m.path.relative_to(PKG)): m.lines for m in MODULES.values()}
    assert not [k for k in LONG_MODULES if lengths.get(k, 0) <= 400]


# ----------------------------------------------------------------------------- (e) one fit runner
#: the backend lifecycle and the engine's round loop: only the fit runner (dpadmm.fit) calls them
_LIFECYCLE = {"start", "run", "close", "step"}


def _drives_a_backend(call: ast.Call) -> str | None:
    """``backend.start(…)`` / ``opts.backend.close()`` / ``engine.run(…)`` …: the call as text, else None."""
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr not in _LIFECYCLE:
        return None
    owner = f.value
    name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
    if "backend" in name.lower() or name == "engine":
        return f"{name}.{f.attr}"
    return None


def _direct_runs(mod: Module) -> list[str]:
    return [f"{mod.name}:{node.lineno} {what}" for node in ast.walk(mod.tree) if isinstance(node, ast.Call)
            for what in [_drives_a_backend(node)] if what]


def test_estimators_and_cli_run_through_the_fit_runner():
    """No estimator or CLI command starts, steps, runs or closes a backend itself (issue 25, item 4): they hand
    typed setups to ``dpadmm.fit.runner``, which always closes the backend."""
    bad = [hit for m in MODULES.values() if m.name.startswith(("dpadmm.estimators", "dpadmm.cli"))
           for hit in _direct_runs(m)]
    assert not bad, f"drive the run through dpadmm.fit.runner instead: {bad}"


def test_the_fit_runner_check_finds_a_planted_call():
    tree = ast.parse("def fit(self, backend, opts):\n    backend.start(specs)\n    engine.run(hub=h)\n"
                     "    opts.backend.close()\n    thread.start()\n")
    planted = Module("dpadmm.estimators.planted", PKG / "planted.py", False, tree, 5)
    assert [h.split(" ")[1] for h in _direct_runs(planted)] == ["backend.start", "engine.run", "backend.close"]


# ----------------------------------------------------------------------------- (f) one declaration per party
def _positional_specs(mod: Module) -> list[str]:
    """Calls of the ``PartySpec`` class itself (``PartySpec(…)``, ``base.PartySpec(…)``): a spec built without its
    protocol declaration; ``PartySpec.of(PROTOCOL, name, Setup(…))`` is an attribute of it, not a call of it."""
    return sorted(f"{mod.name}:{node.lineno}" for node in ast.walk(mod.tree) if isinstance(node, ast.Call)
            and (node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)) == "PartySpec")


def test_src_builds_every_party_spec_from_its_protocol_declaration():
    """Issue 25 ("one declaration per party's protocol"): the library builds a party as
    ``PartySpec.of(PROTOCOL, name, Setup(...))``, never positionally (the deprecated form, kept for callers)."""
    bad = [hit for m in MODULES.values() for hit in _positional_specs(m)]
    assert not bad, f"build these as PartySpec.of(PROTOCOL, name, Setup(...)): {bad}"


def test_the_party_spec_check_finds_a_planted_positional_spec():
    tree = ast.parse("specs = [PartySpec(n, setup, (n, B), step) for n in names]\n"
                     "one = base.PartySpec(name='p', setup=setup)\n"
                     "ok = PartySpec.of(PROTOCOL, n, Setup(name=n, D=B, options=o))\n")
    planted = Module("dpadmm.fit.planted", PKG / "planted.py", False, tree, 3)
    assert _positional_specs(planted) == ["dpadmm.fit.planted:1", "dpadmm.fit.planted:2"]
