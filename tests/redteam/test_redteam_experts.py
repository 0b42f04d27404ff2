"""Red team of the vertical experts protocol (docs/redteam-2026-11-24.md): each finding as a check that must keep
holding. The attacker is the coordinator (the label party): it sends well-formed messages of its choice, as bytes,
to a feature party served with a budget (``PartyService.handle``, the same path as over gRPC)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, _Refused  # noqa: E402
from dpadmm.protocol import PartyData, setup_fields  # noqa: E402
from test_grpc_experts import PROTO, Z, Party, _files, _ledger  # noqa: E402


def _setup(p, train, score, *, model=None, z=Z):
    args = ["party2", train, score, 1.0, 1e-3, z, 0.5] + ([model, None] if model is not None else [])
    return p.call("Setup", {"protocol": PROTO.name, "party": "party2", "index": 0, "rounds": 1, "setup": setup_fields(PROTO, args)})


def _ref(ids, **kw):
    return {"ids": ids, "index": 2, "n_features": 3, "normalize": False, **kw}


def _psi_whole_file(monkeypatch, path):
    """As after a PSI run whose intersection is the whole file: its subsets are rows a Setup may name (issue 26:
    otherwise a subset Setup is refused before any of these checks)."""
    import pandas as pd

    from dpadmm.data import alignment as P

    monkeypatch.setitem(P._ALIGNED, str(path), (P._signature(path), pd.read_csv(path)["id"].to_numpy()))


@pytest.fixture
def party(tmp_path, monkeypatch):
    p = Party(tmp_path)
    _psi_whole_file(monkeypatch, p.svc.data["train"])
    yield p
    p.svc.close()


# ----------------------------------------------------------------------------- E1: training rows scored in a scoring run
class Scorer:
    """party2 started for a scoring run (its training file, its new records, its model file)."""

    def __init__(self, tmp_path, protocol="vertical-experts"):
        from dpadmm.data.parties import write_party_files

        train, test = _files(tmp_path, n=120, n_test=60)
        rng = np.random.default_rng(1)  # new records filed with ids 100…159: 20 of them are training ids (0…119)
        mixed = write_party_files([rng.normal(size=(60, 2)), rng.normal(size=(60, 3))], np.zeros(60), tmp_path / "mixed",
                                  ids=100 + np.arange(60))[1]
        (tmp_path / "fitted").mkdir()
        np.savez(tmp_path / "fitted" / "model.npz", coef=np.ones(4))
        (tmp_path / "fitted" / "model.json").write_text(json.dumps({"private": True, "protocol": protocol}))
        self.svc = PartyService(name="party2", protocol=[PROTO], out=tmp_path / "p2s", secure=False, max_epsilon=3.0,
                                delta=1e-5, data={"train": str(train[1]), "new": str(test[1]), "mixed": str(mixed),
                                                  "model": str(tmp_path / "fitted" / "model.npz")})
        self.allowed = codec.allow_list(PROTO.types)

    def call(self, method, body):
        return codec.decode(self.svc.handle(method, codec.encode(body, allowed=self.allowed), ""), allowed=self.allowed)


@pytest.mark.parametrize("train_ref", [None, PartyData("new", {"ids_only": True}), PartyData("model", {})])
def test_e1_a_scoring_run_checks_against_its_own_training_file_whatever_the_coordinator_names(tmp_path, train_ref):
    """E1 (high): the coordinator named ``train`` = nothing (or the new-records file's ids): nothing to compare with,
    so the party scored its training file's rows — per-row releases of protected rows. Now the party reads the ids
    of its own training file itself."""
    s = Scorer(tmp_path)
    try:
        with pytest.raises(_Refused, match="refused to score 'x': 20 of its rows are training rows"):
            _setup(s, train_ref, {"x": PartyData("mixed", _ref(100 + np.arange(60)))}, model=PartyData("model", {}),
                   z=None)
        with pytest.raises(_Refused, match="refused to score 'x': it is its training file"):
            _setup(s, train_ref, {"x": PartyData("train", _ref(np.arange(120)))}, model=PartyData("model", {}), z=None)
        _setup(s, train_ref, {"x": PartyData("new", _ref(10_000 + np.arange(60)))}, model=PartyData("model", {}), z=None)
        z = s.call("Request", {"handler": "logit", "arguments": {"key": "x"}})["value"]  # new records: served
        assert z.shape == (60,) and np.all(np.isfinite(z))
    finally:
        s.svc.close()


def test_e1_a_fit_reads_its_training_rows_from_its_training_file_only(party):
    """E1 (second way): fit on the party's new-records file (``train`` = key ``test``), then score those rows in a
    later scoring run (checked against the training file): refused at Setup, nothing released."""
    with pytest.raises(_Refused, match="the training rows' file is 'test'"):
        _setup(party, PartyData("test", _ref(party.test_ids)), {})
    assert party.released() == 0


# ----------------------------------------------------------------------------- E2: ids spelled differently
@pytest.mark.parametrize("spell", [lambda a: a.astype(float), lambda a: a.astype(np.float32), lambda a: a.astype(np.int32)])
def test_e2_training_rows_are_recognised_whatever_the_spelling_of_their_ids(party, spell):
    """E2 (high): the coordinator sent the training rows' ids as floats (1.0 for the file's 1): the join accepted
    them, the text comparison ("1" vs "1.0") did not see they were training rows, and their logits were served."""
    train = PartyData("train", _ref(party.train_ids))
    with pytest.raises(_Refused, match="20 of its rows are training rows"):  # "mixed": ids 100…159, 20 are training ids
        _setup(party, train, {"test": PartyData("mixed", _ref(spell(100 + np.arange(60))))})
    assert party.released() == 0


def test_e9_rows_of_the_training_file_outside_the_fit_are_not_scored(party):
    """E9 (high): fit on rows 0…59 of the training file (a PSI subset), then score rows 60…119 of the same file: not
    training rows, so the id check passed, and their logits left the party — records it never shared (outside the
    intersection), covered by no ε. The training file is never a scoring file."""
    train = PartyData("train", _ref(party.train_ids[:60], subset=True))
    with pytest.raises(_Refused, match="refused to score 'test': it is its training file"):
        _setup(party, train, {"test": PartyData("train", _ref(party.train_ids[60:], subset=True))})
    assert party.released() == 0


# ----------------------------------------------------------------------------- E3: a row joined many times
def test_e3_a_training_row_sent_many_times_is_refused(party):
    """E3 (high): with ``subset`` (PSI rows) the join accepted repeated ids: row 0 entered the fit 60 times, so
    replacing that one record moved the minimiser 60× the sensitivity the party priced."""
    ids = np.r_[np.zeros(60, int), np.arange(60, 120)]
    with pytest.raises(Exception, match="repeat id '0'"):
        _setup(party, PartyData("train", _ref(ids, subset=True)), {})
    assert party.released() == 0 and party.svc.cfg is None


# ----------------------------------------------------------------------------- E4: another protocol's model file
def test_e4_a_model_file_of_another_protocol_is_not_scored_as_an_expert(tmp_path):
    """E4 (low): a vertical-sharing block (whose partial scores a private party refuses to release) loaded as an
    expert's model would be served as 'logit' on new records."""
    s = Scorer(tmp_path, protocol="vertical-sharing")
    try:
        with pytest.raises(_Refused, match="is from a 'vertical-sharing' run"):
            _setup(s, None, {"x": PartyData("new", _ref(10_000 + np.arange(60)))}, model=PartyData("model", {}), z=None)
    finally:
        s.svc.close()


# ----------------------------------------------------------------------------- E5: the float range of the proof
def test_e5_a_row_clip_beyond_the_float_range_is_refused_at_setup(party):
    """E5 (high): R = 1e155 (the party's policy fixes no R) overflowed the Newton system; the solver's failure went to
    the coordinator with ‖∇F(x̂)‖ in its text ("got 5.5e+153"), a value of the party's data outside any ledger. Now
    R ∈ [1e-100, 1e100] (and λ, Δ, σ finite > 0) is checked at Setup from public quantities."""
    args = party.args(R=1e155)
    with pytest.raises(_Refused, match="the fit's public scale"):
        party.call("Setup", {"protocol": PROTO.name, "party": "party2", "index": 0, "rounds": 1, "setup": setup_fields(PROTO, args)})
    assert party.released() == 0


def test_e5_a_vanishing_ridge_is_floored_so_collinear_columns_solve(party):
    """E5 (second way): λ = 1e-300 with a huge noise-norm rule made λ used ≈ 0; on collinear columns the Newton system
    was singular and the failure ("LinAlgError: Singular matrix") told the coordinator so. The ridge is now at least
    1e-10 R², the system solves, and the sensitivity uses that λ."""
    from dpadmm.algorithms.experts import model as ve

    X = np.array([[0.6, 0.6], [-0.3, -0.3]])
    coef, info, _ = ve.fit_expert(X, np.array([1.0, -1.0]), R=1.0, lam=1e-300, noise_multiplier=1.0,
                                  rng=np.random.default_rng(0), noise_norm=1e300)
    assert info["lam"] == ve.LAMBDA_FLOOR and info["sensitivity"] == pytest.approx(ve.sensitivity(2, 1.0, 1e-10))
    party.call("Setup", {"protocol": PROTO.name, "party": "party2", "index": 0, "rounds": 1,
                         "setup": setup_fields(PROTO, party.args(lam=1e-300, noise_norm=1e300))})
    facts = party.fit()["outbox"]
    assert facts["lam"] >= ve.LAMBDA_FLOOR and facts["sigma"] == pytest.approx(Z * facts["sensitivity"])


# ----------------------------------------------------------------------------- E6: what the in-process run holds
def test_e6_the_in_process_report_says_it_is_a_simulation():
    """E6 (low): the in-process fit printed "features: ε = 1 … against the coordinator and all other parties" beside
    an un-noised statistic of a party's rows (the CLI's rows_clipped) and with decision_function serving training
    rows' logits, with no note that the driver holds every block there."""
    from dpadmm.estimators.vertical_experts import VerticalExpertsClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] + rng.logistic(size=200) > 0).astype(int)
    m = VerticalExpertsClassifier(epsilon=1.0, random_state=0).fit([X[:, :2], X[:, 2:]], y)
    assert any(n.startswith("in-process simulation") and "training rows" in n for n in m.privacy_.notes)
    assert m.privacy_.to_dict()["notes"] == m.privacy_.notes


# ----------------------------------------------------------------------------- E7: one ledger per dataset
def test_e7_the_readme_scoring_server_keeps_the_fit_servers_ledger():
    """E7 (medium): the README started the scoring server with another --out (a fresh, empty ledger) and the same
    --max-epsilon 8 and training file: a coordinator could ask THAT server for a fit (Setup without the model) and spend
    a second 8 on retail_train.csv. The budget is per ledger, so every server of one training file uses one --out."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    # the user documentation (the README and the site's pages: docs/<section>/*.md), not the red-team reports that quote the old text
    readme = "\n".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*/*.md"))])
    serves = [c for c in re.findall(r"dpadmm party serve --protocol vertical-experts.*?--out (\S+)", readme, re.S)]
    assert len(serves) >= 2 and len(set(serves)) == 1, serves


def test_e7_a_party_started_with_a_model_file_refuses_any_fit(tmp_path):
    """E7 in code: the scoring server (started with --data model=FILE, its own --out and so its own ledger) refuses a
    fit Setup, whatever the coordinator sends; the ledger stays empty and its scoring still works."""
    s = Scorer(tmp_path)
    try:
        with pytest.raises(_Refused, match="refused a fit: it was started with a model file"):
            _setup(s, PartyData("train", _ref(np.arange(120))), {"x": PartyData("new", _ref(10_000 + np.arange(60)))})
        assert _ledger(s.svc)["releases"] == 0
        _setup(s, None, {"x": PartyData("new", _ref(10_000 + np.arange(60)))}, model=PartyData("model", {}), z=None)
        assert s.call("Request", {"handler": "logit", "arguments": {"key": "x"}})["value"].shape == (60,)
    finally:
        s.svc.close()


# ----------------------------------------------------------------------------- E8: a refusal that names a row
def test_e8_a_missing_value_is_refused_for_the_file_never_for_a_chosen_row(tmp_path, monkeypatch):
    """E8 (medium): the join checked only the rows the coordinator chose and named the first bad one ("id 17, column
    'f1'"), so by choosing subsets (PSI rows) a coordinator learnt which records have a missing value — un-noised, per
    record. Now every row of the file is checked (one bit about the file, whatever rows are asked) and no row is
    named."""
    import pandas as pd

    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(40, 3)), columns=["f0", "f1", "f2"])
    df.insert(0, "id", np.arange(40))
    df.loc[17, "f1"] = np.nan
    path = tmp_path / "party2.csv"
    df.to_csv(path, index=False)
    svc = PartyService(name="party2", protocol=[PROTO], out=tmp_path / "p2", secure=False, max_epsilon=8.0, delta=1e-5,
                       data={"train": str(path)})
    _psi_whole_file(monkeypatch, path)
    p = Scorer.__new__(Scorer)
    p.svc, p.allowed = svc, codec.allow_list(PROTO.types)
    try:
        for ids in (np.array([17, 3]), np.array([3, 4])):  # with and without the bad row: the same refusal
            with pytest.raises(Exception, match="missing or non-finite value in column 'f1'") as err:
                _setup(p, PartyData("train", _ref(ids, subset=True)), {})
            assert "17" not in str(err.value).replace(str(path), "")
        assert svc.budget.ledger["releases"] == 0
    finally:
        svc.close()


# ----------------------------------------------------------------------------- audit through the served party
def _served_audit(tmp_path, runs: int = 400):
    """A worst-case pair (row 0 moved to the opposite side of the ball, its label flipped) served by a private party:
    the coordinator fits, asks logits on 6 new records, solves for the coefficient, and projects it on the direction
    the pair moves the minimiser. Returns (ε lower bound, claimed ε, gap/Δ)."""
    from dpadmm.algorithms.experts import model as ve
    from dpadmm.data.parties import write_party_files
    from dpadmm.privacy.accountants import calibrate_noise_multiplier
    from dpadmm.privacy.audit_gdp import gdp_lower_bound

    rng = np.random.default_rng(7)
    n, lam, eps, delta = 30, 2.0, 8.0, 1e-5
    D = rng.standard_normal((n, 2))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    y = np.where(D[:, 0] > 0, 1.0, -1.0)
    D2, y2 = D.copy(), y.copy()
    D2[0], y2[0] = -D[0], -y[0]
    new = rng.standard_normal((6, 2)) * 0.5
    paths = []
    for k, B in enumerate((D, D2)):
        train = write_party_files([np.zeros((n, 1)), B], np.zeros(n), tmp_path / f"t{k}")[1]
        test = write_party_files([np.zeros((6, 1)), new], np.zeros(6), tmp_path / f"n{k}", ids=1000 + np.arange(6))[1]
        paths.append({"train": str(train), "new": str(test)})
    z = calibrate_noise_multiplier(eps, delta, 1)
    x0 = ve.fit_expert(D, y, R=1.0, lam=lam, noise_multiplier=None, rng=rng)[0]
    x1 = ve.fit_expert(D2, y2, R=1.0, lam=lam, noise_multiplier=None, rng=rng)[0]
    u = (x1 - x0) / np.linalg.norm(x1 - x0)
    A = ve.augment(new, 1.0)
    allowed = codec.allow_list(PROTO.types)
    scores = []
    for k, labels in ((0, y), (1, y2)):
        svc = PartyService(name="party2", protocol=[PROTO], out=tmp_path / f"p{k}", secure=False, private_only=True,
                           data=paths[k])
        call = lambda m, b: codec.decode(svc.handle(m, codec.encode(b, allowed=allowed), ""), allowed=allowed)  # noqa: E731
        ref = {"index": 2, "n_features": 2}
        args = ["party2", PartyData("train", {**ref, "ids": np.arange(n)}),
                {"new": PartyData("new", {**ref, "ids": 1000 + np.arange(6)})}, 1.0, lam, z, 1e9]
        s = []
        for _ in range(runs):
            call("Setup", {"protocol": PROTO.name, "party": "party2", "index": 0, "rounds": 1, "setup": setup_fields(PROTO, args)})
            call("Step", {"round": 0, "inbox": vp_fit(labels)})
            logit = np.asarray(call("Request", {"handler": "logit", "arguments": {"key": "new"}})["value"])
            s.append(np.linalg.lstsq(A, logit, rcond=None)[0] @ u)  # the coefficient, from its logits
        svc.close()
        scores.append(np.array(s))
    lb = gdp_lower_bound(scores[0], scores[1], delta, alpha=1e-3)["epsilon_lower_bound"]
    return lb, eps, float(np.linalg.norm(x1 - x0)) / ve.sensitivity(n, 1.0, lam)


def vp_fit(labels):
    from dpadmm.algorithms.experts import messages as vp

    return vp.FitRequest(np.asarray(labels, dtype=np.float64), None)


@pytest.mark.slow
def test_audit_of_the_coefficient_a_served_party_releases(tmp_path, monkeypatch):
    """Through the served party (Setup, fit, logits on new records, over the exact bytes): the GDP lower bound on the
    worst-case pair stays under the claimed ε = 8 and reaches a fair share of what the pair allows; the same
    audit catches a planted 10× under-noised party (its lower bound is above the claim)."""
    from dpadmm.algorithms.experts import model as ve
    from dpadmm.privacy.accountants import calibrate_noise_multiplier
    from dpadmm.privacy.audit_gdp import gdp_epsilon

    runs = 1000
    lb, eps, ratio = _served_audit(tmp_path / "honest", runs)
    assert lb <= eps
    # power: the pair's μ is ratio/z; the bound subtracts z_{1−α/2}·√(2/runs) (α = 1e-3: 3.29) and divides by an upper
    # bound on σ (≤ 1.1σ at 1000 runs); 4 more standard errors below that fails falsely with probability ≈ 3e-5
    mu = ratio / calibrate_noise_multiplier(eps, 1e-5, 1)
    floor = gdp_epsilon(max((mu - (3.29 + 4.0) * np.sqrt(2.0 / runs)) / 1.1, 0.0), 1e-5)
    assert ratio > 0.3 and lb >= floor > 0, (lb, floor, ratio)
    real = ve.gaussian
    from dpadmm.algorithms.experts import model as experts_model  # the fit's home module (ve re-exports it)

    monkeypatch.setattr(experts_model, "gaussian", lambda rng, sigma, k: real(rng, 0.1 * sigma, k))  # the planted bug
    planted, _, _ = _served_audit(tmp_path / "planted", 200)
    assert planted > eps


@pytest.mark.slow  # ~3 CPU-seconds: the default suite stays under 3 CPU-minutes (CI runs the slow suite too)
def test_l1_the_party_module_imports_on_its_own():
    """L1 (low): ``import dpadmm.algorithms.experts.party`` first failed (circular import with the protocol's
    declaration), e.g. for a party process or a script that imports it before anything else."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import dpadmm.algorithms.experts.party as vp; vp.setup_party"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-300:]


# ----------------------------------------------------------------------------- E10: the checks' shapes
@pytest.mark.parametrize("score", [
    [["test", PartyData("train", _ref(np.arange(60, 120), subset=True))]],  # a list of pairs: dict() makes it a mapping
    {"test": [PartyData("train", _ref(np.arange(60, 120), subset=True))]},  # a reference nested in a list
])
def test_e10_scoring_references_in_another_shape_are_refused(party, score):
    """E10 (high): the scoring files sent as a list of pairs (``setup_party`` does ``dict(score)``) passed around the
    checks that read a mapping — the training file's rows outside the fit were scored (E9 again), and a preparation
    other than the party's (``normalize``) passed its policy."""
    train = PartyData("train", _ref(np.arange(60), subset=True))
    with pytest.raises(_Refused, match="the scoring argument is 'list'|the scoring argument is 'dict'"):
        _setup(party, train, score)
    assert party.released() == 0


def test_e11_a_model_without_its_record_is_not_served_as_private(tmp_path):
    """E11 (medium): a model.npz without its model.json (copied alone, or the record lost) was read as private (the
    scoring protocol's "stricter case", which for experts is the permissive one: a private model's logits are
    served), so a budgeted party served logits of a coefficient that may never have been noised."""
    s = Scorer(tmp_path)
    meta = tmp_path / "fitted" / "model.json"
    try:
        for record in (None, {"noise_source": "party-local"}):  # lost; without "private"
            meta.unlink(missing_ok=True)
            if record is not None:
                meta.write_text(json.dumps(record))
            with pytest.raises(_Refused, match="refused a non-private run"):
                _setup(s, None, {"x": PartyData("new", _ref(10_000 + np.arange(60)))}, model=PartyData("model", {}),
                       z=None)
    finally:
        s.svc.close()


def test_e9_the_training_file_under_a_second_key_is_not_scored(tmp_path, monkeypatch):
    """E9 (second way): the operator gave its training file under two keys (``--data train=F --data test=F``); rows of
    F outside the fit passed the id check under the key ``test``. The party compares the files themselves."""
    p = Party(tmp_path)
    p.svc.data["test"] = p.svc.data["train"]  # as if started with --data test=<the training file>
    _psi_whole_file(monkeypatch, p.svc.data["train"])
    try:
        with pytest.raises(_Refused, match="refused to score 'test': it is its training file"):
            _setup(p, PartyData("train", _ref(p.train_ids[:60], subset=True)),
                   {"test": PartyData("test", _ref(p.train_ids[60:], subset=True))})
        assert p.released() == 0
    finally:
        p.svc.close()
