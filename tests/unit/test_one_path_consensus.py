"""One path from parameters to release for the consensus, gossip and functional fits (issue 39, item 1), read from
the source with :mod:`ast` (nothing is imported):

(a) ε becomes noise, α or a schedule only inside ``src/dpadmm/algorithms/``: no module on these fits' paths outside
    it calls (or imports) the ε → σ / α / schedule functions — each folder's ``params``/``driver`` does, once;
(b) nothing outside ``src/dpadmm/estimators/`` takes an estimator: no function outside a class has a parameter
    named ``self``/``est``/``estimator``, and none reads ``est._…`` / ``estimator._…``.

The vertical family's twin is ``test_one_path_vertical.py``."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "dpadmm"

#: the ε → noise / α / schedule functions (gossip's schedule and multiplier, M-ADMM's α, functional's z, the
#: accountant's calibration and the μ-GDP point every one of them starts from)
EPSILON_TO_NOISE = frozenset({
    "default_schedule", "default_rounds", "noise_multiplier_for", "gdp_mu",  # gossip (schedule.py, report.py)
    "plan",  # gossip's plan is called by name from a caller that only counts rounds: allowed below
    "alpha_for_budget", "solve_alpha",  # M-ADMM's α for a budget (schedules.py, params.py)
    "iteration_noise_multiplier", "calibrate_total", "calibrate",  # functional (report.py, driver_stages.py)
    "calibrate_noise_multiplier",  # the accountant's (privacy/accountants)
})
#: callers on these paths that ask the folder for its answer (its public function, not a computation of their own)
FOLDER_ENTRY_POINTS = {
    "cli/_consensus_gossip.py": {"plan"},  # the progress bar's count of rounds: the folder's plan, noise=False
    "workflows/consensus.py": {"solve_alpha"},  # --epsilon with pp/dvp: the folder's ε → α
}
#: the modules on the consensus, gossip and functional paths outside the algorithm folders
PATH_MODULES = ("estimators/consensus.py", "estimators/functional.py", "fit/runner.py", "fit/__init__.py",
                "workflows/gossip.py", "workflows/consensus.py", "experiments/zhang.py", "cli/_consensus_gossip.py", "data/graphs.py")
ALGORITHM_FOLDERS = ("algorithms/gossip", "algorithms/consensus", "algorithms/functional")
ESTIMATOR_NAMES = frozenset({"self", "est", "estimator"})


def _tree(rel: str) -> ast.Module:
    return ast.parse((SRC / rel).read_text())


def epsilon_to_noise(tree: ast.Module, allowed=frozenset()) -> list[str]:
    """Calls and imports of :data:`EPSILON_TO_NOISE` names not in ``allowed``, as ``line name``."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in EPSILON_TO_NOISE and name not in allowed:
                bad.append(f"{node.lineno} {name}()")
        elif isinstance(node, ast.ImportFrom):
            bad += [f"{node.lineno} import {a.name}" for a in node.names
                    if a.name in EPSILON_TO_NOISE and a.name not in allowed]
    return sorted(bad, key=lambda h: int(h.split()[0]))


def takes_an_estimator(tree: ast.Module) -> list[str]:
    """Functions outside a class with a ``self``/``est``/``estimator`` parameter; ``est._x`` reads anywhere and
    ``self._x`` outside a class."""
    in_class: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            in_class |= {id(n) for n in ast.walk(node)}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and id(node) not in in_class:
            a = node.args
            names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            bad += [f"{node.lineno} parameter {n}" for n in names if n in ESTIMATOR_NAMES]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_")
              and not node.attr.startswith("__") and node.value.id in ESTIMATOR_NAMES
              and (node.value.id != "self" or id(node) not in in_class)):
            bad.append(f"{node.lineno} {node.value.id}.{node.attr}")
    return sorted(bad, key=lambda h: int(h.split()[0]))


def _folder_modules() -> list[str]:
    return [str(p.relative_to(SRC)) for d in ALGORITHM_FOLDERS for p in sorted((SRC / d).glob("*.py"))]


def test_no_module_outside_the_algorithm_folders_turns_epsilon_into_noise():
    bad = {rel: hits for rel in PATH_MODULES
           if (hits := epsilon_to_noise(_tree(rel), frozenset(FOLDER_ENTRY_POINTS.get(rel, ())))) }
    assert not bad, f"ε → noise/α/schedule outside algorithms/ (call the folder's params/driver instead): {bad}"


def test_the_folder_entry_points_are_the_folders_functions():
    """The allowed names come from the folders (an entry point is not a local copy of the computation)."""
    for rel, names in FOLDER_ENTRY_POINTS.items():
        sources = {a.name: node.module for node in ast.walk(_tree(rel)) if isinstance(node, ast.ImportFrom)
                   for a in node.names if a.name in names}
        assert set(sources) == names, (rel, sources)
        assert all(m.split(".")[-3] == "algorithms" or "algorithms." in m for m in sources.values()), (rel, sources)


def test_nothing_outside_the_estimators_takes_an_estimator():
    bad = {rel: hits for rel in PATH_MODULES + tuple(_folder_modules())
           if not rel.startswith("estimators/") and (hits := takes_an_estimator(_tree(rel)))}
    assert not bad, f"an estimator passed outside estimators/ (give the driver typed parameters instead): {bad}"


def test_the_epsilon_check_finds_planted_calibrations():
    tree = ast.parse("from ..algorithms.gossip.schedule import default_schedule\n"
                     "T = default_schedule(n, d, eps, n_nodes=N).rounds\n"
                     "a = gc.alpha_for_budget(eps, C=C, B=B, degree=V, eta=eta)\n"
                     "z = calibrate_noise_multiplier(eps, 1e-5, T)\n"
                     "ok = plan(params, n, d, N, noise=False).rounds\n")
    assert epsilon_to_noise(tree, frozenset({"plan"})) == [
        "1 import default_schedule", "2 default_schedule()", "3 alpha_for_budget()", "4 calibrate_noise_multiplier()"]


def test_the_estimator_check_finds_planted_couplings():
    tree = ast.parse("def fit_estimator(self, X, y):\n    self.coef_ = 0\n"
                     "def run(est):\n    return est._node_data(X)\n"
                     "def read(model):\n    return estimator._gossip\n"
                     "class Ok:\n    def fit(self):\n        return self._params()\n")
    assert takes_an_estimator(tree) == ["1 parameter self", "3 parameter est", "4 est._node_data",
                                        "6 estimator._gossip"]
