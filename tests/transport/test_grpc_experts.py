"""The vertical experts protocol across organisations: every feature party serves ``vertical-experts`` over gRPC,
fits its DP model once (priced by its own policy as ONE Gaussian release), keeps it, and answers only its logits
on NEW records; the label party (the coordinator) keeps its own model and the combination.

The seeded run over gRPC equals the in-process run to 1e-12 (CLI and estimator), the party's ledger equals the
report's per-party ε, and every departure the party's policy does not accept is refused before anything is
released: an empty ledger and one refusal line in its audit log."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms.experts import model as experts_model, protocol as experts_protocol  # noqa: E402
from dpadmm.algorithms.experts import messages as vp  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, _Refused  # noqa: E402
from conftest import ledger_of  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.estimators.vertical_experts import VerticalExpertsClassifier  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy  # noqa: E402
from dpadmm.protocol import PartyData, find_protocol, request_arguments, setup_fields  # noqa: E402
from conftest import run_cli, serve_parties  # noqa: E402

BUDGET = dict(max_epsilon=3.0, delta=1e-5)
NORMALIZING = PartyPolicy(relation="record", normalize_vertical_rows=True)  # the party's own preparation
PROTO = experts_protocol.PROTOCOL


def _blocks(n, seed=0, d=(2, 3, 2)):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, sum(d)))
    y = np.where(X @ rng.normal(size=sum(d)) + rng.logistic(size=n) > 0, 1, 0)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    cuts = np.cumsum(d)[:-1]
    return np.split(X, cuts, axis=1), y


def _files(tmp_path, n=240, n_test=120):
    """Party CSVs: training ids 0…n−1, test ids 10000…; party1 holds the labels."""
    blocks, y = _blocks(n + n_test)
    train = write_party_files([b[:n] for b in blocks], y[:n], tmp_path / "train", prefix="party")
    test = write_party_files([b[n:] for b in blocks], y[n:], tmp_path / "test", prefix="party",
                             ids=10_000 + np.arange(n_test))
    return train, test


def _services(tmp_path, train, test, names=("party2", "party3"), **kw):
    kw = {**BUDGET, **kw}
    return {name: PartyService(name=name, protocol=[PROTO], out=tmp_path / name, secure=False, allow_seeded_noise=True,
                               data={"train": str(train[int(name[-1]) - 1]), "test": str(test[int(name[-1]) - 1])},
                               describe_options={"id_column": "id", "label_column": "y"}, **kw) for name in names}


def _ledger(svc):
    svc.budget.close_run()
    return ledger_of(svc)


def _audit(svc):
    return [json.loads(x) for x in svc.audit_path.read_text().splitlines()]


class _ProductAsFitted:
    """The in-process CLI fit without the label party's choice (``calibrate=False``): the product of experts as
    fitted on every row, which is what a deployment (``fit_remote``) hands over. Since issue 38 the in-process choice
    holds out rows at every size, so the two runs are compared on the product."""

    @staticmethod
    def install(monkeypatch):
        import dataclasses

        from dpadmm.estimators import vertical_experts as ve_mod

        class NoChoice(ve_mod.VerticalExpertsClassifier):
            def _params(self):
                return dataclasses.replace(super()._params(), calibrate=False)

        monkeypatch.setattr(ve_mod, "VerticalExpertsClassifier", NoChoice)


def test_cli_over_grpc_equals_in_process_and_each_ledger_equals_the_report(tmp_path, capsys, monkeypatch):
    _ProductAsFitted.install(monkeypatch)
    train, test = _files(tmp_path)
    common = ["vertical", "experts", "--epsilon", "1", "--prepare", "normalize-rows", "--seed", "3"]
    code, out_local, err = run_cli([*common, *sum((["--party", p] for p in train), []),
                                    *sum((["--test-party", p] for p in test), []), "--out", tmp_path / "local"], capsys)
    assert code == 0, err
    services = _services(tmp_path, train, test, policy=NORMALIZING)
    peers, stop = serve_parties(services)
    try:
        code, out_grpc, err = run_cli([*common, "--backend", "grpc", "--insecure", "--party", train[0], "--test-party",
                                       test[0], *sum((["--peer", f"{n}={a}"] for n, a in peers.items()), []),
                                       "--out", tmp_path / "grpc"], capsys)
        assert code == 0, err
        ledgers = {n: _ledger(s) for n, s in services.items()}
    finally:
        stop()
    local = json.loads((tmp_path / "local" / "metrics.json").read_text())
    remote = json.loads((tmp_path / "grpc" / "metrics.json").read_text())
    for k in ("test_log_loss", "test_accuracy", "test_auc"):
        assert remote["final"][k] == pytest.approx(local["final"][k], rel=1e-12, abs=1e-12)
    assert remote["final"]["expert_lambdas"] == pytest.approx(local["final"]["expert_lambdas"], rel=1e-12)
    assert remote["baselines"] == local["baselines"]
    assert remote["privacy"]["per_party"] == pytest.approx(local["privacy"]["per_party"], rel=1e-12)
    assert remote["config"]["backend"] == "grpc" and remote["privacy"]["noise_source"] == "seeded"
    # the same lines, the same figures
    first = [ln for ln in out_local.splitlines() if ln.startswith(("experts:", "baselines"))]
    assert first and first == [ln for ln in out_grpc.splitlines() if ln.startswith(("experts:", "baselines"))]
    for name, led in ledgers.items():  # the party's own account = the coordinator's report (one release)
        assert led["releases"] == 1 and led["relation"] == "record_replace"
        assert led["epsilon_spent"] == pytest.approx(remote["privacy"]["per_party"][name], rel=1e-6)
        assert (tmp_path / name / "model.npz").is_file()  # the model stayed at its party
        steps = [r for r in _audit(services[name]) if r["method"] == "Request"]
        assert steps and all(r["request"] for r in steps)
    # later: the bank scores new customers (here the test file again) from the models the parties kept
    scoring = {name: PartyService(name=name, protocol=[PROTO], out=tmp_path / f"{name}-scoring", secure=False,
                                  policy=NORMALIZING, max_epsilon=3.0, delta=1e-5,
                                  data={"train": str(train[int(name[-1]) - 1]), "new": str(test[int(name[-1]) - 1]),
                                        "model": str(tmp_path / name / "model.npz")})
               for name in ("party2", "party3")}
    peers, stop = serve_parties(scoring)
    try:
        code, out, err = run_cli(["score", "--insecure", "--party", test[0], "--model", tmp_path / "grpc",
                                  *sum((["--peer", f"{n}={a}"] for n, a in peers.items()), []),
                                  "--out", tmp_path / "scores"], capsys)
        assert code == 0, err
        # the scoring server keeps the fit's budget (one per data set, whatever its --out) and releases nothing new
        assert all(_ledger(s)["releases"] == ledgers[n]["releases"] == 1 for n, s in scoring.items())
    finally:
        stop()
    scored = json.loads((tmp_path / "scores" / "metrics.json").read_text())
    for k in ("test_log_loss", "test_accuracy", "test_auc"):
        assert scored[k] == pytest.approx(remote["final"][k], rel=1e-12, abs=1e-12)
    assert f"test log loss: {remote['final']['test_log_loss']:.4f}" in out


def test_a_scoring_run_refuses_the_training_file_and_a_fit(tmp_path):
    """A later scoring run (the party's model file): a new-records file sharing ids with the training file is refused
    at Setup; a fit is refused (nothing is priced, so nothing may be released); logits on new records are served."""
    from dpadmm.backends import PartySpec
    from dpadmm.exceptions import ProtocolError

    train, test = _files(tmp_path, n=120, n_test=60)
    (tmp_path / "fitted").mkdir()
    np.savez(tmp_path / "fitted" / "model.npz", coef=np.ones(4))
    (tmp_path / "fitted" / "model.json").write_text(json.dumps({"private": True}))
    svc = PartyService(name="party2", protocol=[PROTO], out=tmp_path / "p2s", secure=False, max_epsilon=3.0,
                       delta=1e-5, data={"train": str(train[1]), "new": str(test[1]),
                                         "model": str(tmp_path / "fitted" / "model.npz")})

    def spec(key, ids):
        new = {"new": PartyData(key, {"ids": ids, "index": 2, "n_features": 3})}
        return PartySpec.of(PROTO, "party2", PROTO.setup_type(
            name="party2", train=PartyData("train", {"ids_only": True}), score=new, R=1.0, lam=1e-3,
            noise_multiplier=None, noise_norm=0.5, model=PartyData("model", {}), flip_probability=0.2))

    peers, stop = serve_parties({"party2": svc})
    backend = GrpcBackend(peers, insecure=True, timeout=30)
    try:
        with pytest.raises(ProtocolError, match="refused to score 'new': it is its training file"):
            backend.start([spec("train", np.arange(120))], rounds=1)
        backend.start([spec("new", 10_000 + np.arange(60))], rounds=1)
        with pytest.raises(ProtocolError, match="refused a fit in a scoring run"):
            backend.step({"party2": vp.FitRequest(np.ones(120), None)}, 0)
        z = np.asarray(backend.request("party2", "logit", "new"))
        assert z.shape == (60,) and np.all(np.isfinite(z))
        assert _ledger(svc)["releases"] == 0
        assert [r["status"] for r in _audit(svc) if r["method"] in ("Setup", "Step")] == ["refused", "ok", "refused"]
    finally:
        stop()


def test_estimator_over_grpc_equals_in_process_with_randomized_response_labels(tmp_path):
    """Label ε = 1 (flipped labels sent, each party de-biases its logit by the public flip probability), ε = 1 per
    party: the combined test logit over gRPC equals the in-process one to 1e-12."""
    train, test = _files(tmp_path)
    blocks, y = _blocks(360)
    local_blocks = [b[:240] / np.maximum(np.linalg.norm(b[:240], axis=1, keepdims=True), 1e-300) for b in blocks]
    local_test = [b[240:] / np.maximum(np.linalg.norm(b[240:], axis=1, keepdims=True), 1e-300) for b in blocks]
    kw = dict(epsilon=1.0, label_epsilon=1.0, min_effective_rows=0, random_state=7)
    # the deployment's parties use their rows as their policy prepares them (normalised here) and hand over the product
    # of experts: the in-process fit the same way (no DP column range, no held-out choice)
    local = VerticalExpertsClassifier(**kw, bounds=None, calibrate=False).fit(local_blocks, y[:240])
    services = _services(tmp_path, train, test, policy=NORMALIZING)
    peers, stop = serve_parties(services)
    backend = GrpcBackend(peers, insecure=True, timeout=60)
    try:
        ref = {"index": 2, "normalize": True}
        parties = {n: (PartyData("train", {**ref, "ids": np.arange(240), "n_features": int(d)}),
                       {"test": PartyData("test", {**ref, "ids": 10_000 + np.arange(120), "n_features": int(d)})})
                   for n, d in (("party2", 3), ("party3", 2))}
        remote = VerticalExpertsClassifier(**kw).fit_remote(local_blocks[0], y[:240], backend, parties)
        logit = remote.remote_decision(local_test[0], "test")
        backend.close()
    finally:
        stop()
    np.testing.assert_allclose(logit, local.decision_function(local_test), rtol=1e-12, atol=1e-12)
    assert remote.flip_probability_ == local.flip_probability_ > 0
    assert remote.privacy_.to_dict()["per_party"] == local.privacy_.to_dict()["per_party"]
    assert remote.privacy_.to_dict()["label"] == local.privacy_.to_dict()["label"]


def test_a_label_party_that_keeps_its_own_model_contacts_no_party(tmp_path):
    train, test = _files(tmp_path)
    services = _services(tmp_path, train, test, policy=NORMALIZING)
    peers, stop = serve_parties(services)
    try:
        blocks, y = _blocks(240)
        parties = {n: (PartyData("train", {"ids": np.arange(240)}), {}) for n in ("party2", "party3")}
        m = VerticalExpertsClassifier(epsilon=1.0, label_epsilon=1.0).fit_remote(
            blocks[0], y, GrpcBackend(peers, insecure=True, timeout=60), parties)
        assert m.kept_own_model_ and m.privacy_.epsilon == 0.0
        Z = (blocks[0] - m.own_scaling_[0]) / m.own_scaling_[1]  # its own columns, its own statistics
        np.testing.assert_allclose(m.remote_decision(blocks[0]), Z @ m.own_coef_[:-1] + m.own_coef_[-1], rtol=1e-12)
        for svc in services.values():
            assert not [r for r in _audit(svc) if r["method"] != "Start"] and _ledger(svc)["releases"] == 0
    finally:
        stop()


# ----------------------------------------------------------------------------- the party's refusals, message by message
Z = 1.5  # σ/Δ of the honest run: one release is ε ≈ 2.75 at δ = 1e-5 (the party's cap here: 8)


class Party:
    """party2 driven through ``PartyService.handle`` with the exact bytes a coordinator sends."""

    def __init__(self, tmp_path, policy=None, **kw):
        train, test = _files(tmp_path, n=120, n_test=60)
        self.train_ids, self.test_ids = np.arange(120), 10_000 + np.arange(60)
        blocks, _ = _blocks(60, seed=1)
        mixed = write_party_files(blocks, np.zeros(60), tmp_path / "mixed", ids=100 + np.arange(60))  # ids 100…159
        self.paths = {"train": str(train[1]), "test": str(test[1]), "mixed": str(mixed[1])}
        self.svc = PartyService(name="party2", protocol=[PROTO], out=tmp_path / "party2", secure=False,
                                data=self.paths, policy=policy, **{**dict(max_epsilon=8.0, delta=1e-5), **kw})
        self.allowed = codec.allow_list(PROTO.types)

    def call(self, method, body):
        return codec.decode(self.svc.handle(method, codec.encode(body, allowed=self.allowed), ""), allowed=self.allowed)

    def args(self, *, score_ids=None, score_key="test", R=1.0, lam=1e-3, z=Z, noise_norm=0.5, normalize=False):
        ref = {"ids": self.train_ids, "index": 2, "n_features": 3, "normalize": normalize}
        score = {"test": PartyData(score_key, {**ref, "ids": self.test_ids if score_ids is None else score_ids})}
        return ["party2", PartyData("train", ref), score, R, lam, z, noise_norm]

    def setup(self, rounds=1, **kw):
        return self.call("Setup", {"protocol": PROTO.name, "party": "party2", "index": 0, "rounds": rounds,
                                   "setup": setup_fields(PROTO, self.args(**kw))})

    def fit(self, t=0, labels=None, flip=None):
        y = np.where(np.arange(120) % 3 == 0, 1.0, -1.0) if labels is None else labels
        return self.call("Step", {"round": t, "inbox": vp.FitRequest(y, flip)})

    def request(self, handler, *args):
        return self.call("Request", {"handler": handler, "arguments": request_arguments(PROTO.handlers.get(handler), args)})["value"]

    def released(self):  # the party's ledger in memory (its journal on disk holds the same lines)
        return int(self.svc.budget.ledger["releases"])

    def last_refusal(self, method):
        rec = [r for r in _audit(self.svc) if r["status"] == "refused"]
        assert rec and rec[-1]["method"] == method and "reply" not in rec[-1]
        return rec[-1]["detail"]


@pytest.fixture
def party(tmp_path):
    p = Party(tmp_path)
    yield p
    p.svc.close()


def test_the_honest_run_fits_once_and_scores_new_records_only(party):
    party.setup()
    facts = party.fit()["outbox"]
    assert set(facts) == {"lam", "sensitivity", "sigma", "rows", "columns", "row_clip"}  # public facts only
    assert facts["sigma"] == pytest.approx(Z * facts["sensitivity"], rel=1e-12)
    assert party.released() == 1
    led = ledger_of(party.svc)  # a row of the store, committed before the reply left
    assert led["releases"] == 1 and led["runs"][-1]["last_round"] == 1
    z = party.request("logit", "test")
    assert z.shape == (60,) and np.all(np.isfinite(z))
    with pytest.raises(_Refused, match="declares only \\['logit'\\]"):  # the coefficient is not even declared
        party.request("coef")
    assert "declares only" in party.last_refusal("Request")
    with pytest.raises(_Refused, match="scores only the new-records files it was set up with \\['test'\\]"):
        party.request("logit", "train")
    assert party.released() == 1


@pytest.mark.parametrize("bad, match", [
    (dict(score_key="mixed", score_ids=100 + np.arange(60)), "refused to score 'test': 20 of its rows are training rows"),
    (dict(score_key="train", score_ids=np.arange(120)), "refused to score 'test': it is its training file"),
    (dict(R=2.0), "the row clip R is 2.0, its operator's policy requires R = 1"),
    (dict(lam=0.0), "the ridge lam is 0.0"),
    (dict(lam=float("nan")), "the ridge lam is nan"),
    (dict(noise_norm=float("inf")), "the noise-norm rule is inf"),
    (dict(z=0.2), "the noise multiplier σ/Δ is 0.2"),
    (dict(z=None), "refused a non-private run"),
    (dict(normalize=True), "the preparation of 'train' is 'normalize-rows'"),
    (dict(z=0.55), "would bring its spend to ε = 8.895.*above its operator's cap --max-epsilon 8"),  # one release
])
def test_each_setup_the_policy_does_not_accept_is_refused_before_any_release(tmp_path, bad, match):
    p = Party(tmp_path, policy=PartyPolicy(row_clip=1.0))
    try:
        with pytest.raises(_Refused, match=match) as err:
            p.setup(**bad)
        assert p.last_refusal("Setup") == str(err.value)  # the same line in the party's audit log
        assert p.released() == 0
        with pytest.raises(_Refused, match="no run is set up"):  # and nothing can be fitted
            p.fit()
        p.setup()  # the honest Setup is served: the refusal was for the right reason
        p.fit()
        assert p.released() == 1
    finally:
        p.svc.close()


@pytest.mark.parametrize("labels, flip, match", [
    (np.zeros(120), None, "one ±1 per training row"),
    (np.ones(119), None, "one ±1 per training row"),
    (np.full(120, 2.0), None, "one ±1 per training row"),
    (np.ones(120), 0.5, "flip probability 0.5"),
])
def test_labels_the_sensitivity_does_not_cover_are_refused_and_nothing_is_released(party, labels, flip, match):
    party.setup()
    with pytest.raises(_Refused, match=match):
        party.fit(labels=labels, flip=flip)
    assert "refused the fit" in party.last_refusal("Step")
    assert party.released() == 0
    with pytest.raises(_Refused, match="no model yet"):  # no model to score with
        party.request("logit", "test")


def test_a_second_fit_is_a_second_release_and_is_refused(party):
    party.setup(rounds=2)  # even when the coordinator declares two rounds, the price is one release
    priced = party.svc.budget.run["priced"]["gaussian"]
    assert list(priced.values()) == [1] and float(next(iter(priced))) == pytest.approx(Z, rel=1e-7)
    party.fit(0)
    with pytest.raises(_Refused, match="refused a second fit in one run"):
        party.fit(1)
    assert party.released() == 1
    party.setup(rounds=1)
    party.fit(0)
    with pytest.raises(_Refused, match="declared 1 rounds"):
        party.fit(1)
    assert party.released() == 2


def test_a_tiny_coordinator_lambda_does_not_shrink_the_noise(party):
    party.setup(lam=1e-300)
    facts = party.fit()["outbox"]
    rule = experts_model.expert_lambda(120, 3, 1.0, Z, 0.0)
    assert facts["lam"] == pytest.approx(rule, rel=1e-12) and rule > 1e-3
    assert facts["sensitivity"] == pytest.approx(experts_model.sensitivity(120, 1.0, rule), rel=1e-12)
    assert facts["sigma"] == pytest.approx(Z * experts_model.sensitivity(120, 1.0, rule), rel=1e-12)


def test_the_protocol_is_declared_with_the_party_policy():
    proto = find_protocol("vertical-experts")
    assert set(proto.handlers) == {"logit"} and proto.policy is not None and "train" in proto.data_fields
    assert proto.policy.price(vp.ExpertConfig("p", np.zeros((2, 1)), noise_multiplier=Z), 5).gaussian == {Z: 1}


# ----------------------------------------------------------------------------- CLI usage errors (no party contacted)
@pytest.mark.parametrize("extra, match", [
    (["--backend", "process"], "`dpadmm vertical experts` runs in-process .* or across organisations .*drop --backend process"),
    (["--psi"], "--psi aligns the rows of parties in different organisations: it needs --backend grpc"),
    (["--peer", "party2=127.0.0.1:1"], "--peer, --tls and --insecure need --backend grpc"),
    (["--backend", "grpc", "--insecure", "--peer", "party3=127.0.0.1:1"], "must be named party2, party3"),
    (["--backend", "grpc", "--insecure", "--peer", "party2=127.0.0.1:1", "--data", "a9a"],
     "--train/--data do not apply"),
])
def test_cli_usage_errors_name_the_problem(tmp_path, capsys, extra, match):
    train, test = _files(tmp_path, n=40, n_test=20)
    code, out, err = run_cli(["vertical", "experts", "--party", train[0], *extra,
                              "--out", tmp_path / "o"], capsys)
    assert code == 2 and not (tmp_path / "o").exists()
    import re

    assert re.search(match, " ".join(err.split())), err


def test_psi_aligned_experts_equal_the_in_process_run_on_the_intersection(tmp_path, capsys, monkeypatch):
    """Parties whose id lists overlap only in part: with --psi every side trains and scores on the intersection,
    and the numbers equal the in-process run on files holding exactly the intersection."""
    _ProductAsFitted.install(monkeypatch)
    pytest.importorskip("private_set_intersection")
    from dpadmm.algorithms.psi import protocol as P

    blocks, y = _blocks(400, seed=5)
    ids = np.arange(400)
    keep = [ids[ids % 7 != 0], ids[ids % 5 != 1], ids[ids % 4 != 2]]  # each party lacks a different subset
    common = np.intersect1d(np.intersect1d(keep[0], keep[1]), keep[2])
    split = {"train": ids[ids < 260], "test": ids[ids >= 260]}
    files = {}
    for key, rows in split.items():
        for m, B in enumerate(blocks):
            held = np.intersect1d(rows, keep[m])
            files[(key, m)] = write_party_files([B[held]] if m == 0 else [np.zeros((len(held), 1)), B[held]],
                                                y[held], tmp_path / f"{key}{m}", ids=held)[0 if m == 0 else 1]
            both = np.intersect1d(rows, common)
            files[(key, "common", m)] = write_party_files([B[both]] if m == 0 else [np.zeros((len(both), 1)), B[both]],
                                                          y[both], tmp_path / f"{key}c{m}", ids=both)[0 if m == 0 else 1]
    services = {f"party{m + 1}": PartyService(
        name=f"party{m + 1}", protocol=[PROTO, P.PROTOCOL], out=tmp_path / f"party{m + 1}", secure=False,
        allow_seeded_noise=True, policy=NORMALIZING, max_epsilon=3.0, delta=1e-5,
        data={"train": str(files[("train", m)]), "test": str(files[("test", m)])}) for m in (1, 2)}
    args = ["vertical", "experts", "--epsilon", "1", "--prepare", "normalize-rows", "--seed", "2"]
    peers, stop = serve_parties(services)
    try:
        code, out, err = run_cli([*args, "--backend", "grpc", "--insecure", "--psi", "--party", files[("train", 0)],
                                  "--test-party", files[("test", 0)],
                                  *sum((["--peer", f"{n}={a}"] for n, a in peers.items()), []),
                                  "--out", tmp_path / "grpc"], capsys)
        assert code == 0, err
    finally:
        stop()
    code, _, err = run_cli([*args, *sum((["--party", files[("train", "common", m)]] for m in range(3)), []),
                            *sum((["--test-party", files[("test", "common", m)]] for m in range(3)), []),
                            "--out", tmp_path / "local"], capsys)
    assert code == 0, err
    remote = json.loads((tmp_path / "grpc" / "metrics.json").read_text())
    local = json.loads((tmp_path / "local" / "metrics.json").read_text())
    assert remote["config"]["psi"]["train"]["rows"] == int(np.sum(common < 260))
    for k in ("test_log_loss", "test_accuracy", "test_auc"):
        assert remote["final"][k] == pytest.approx(local["final"][k], rel=1e-12, abs=1e-12)


def test_a_refusal_stops_the_cli_run_with_one_line_and_writes_nothing(tmp_path, capsys):
    train, test = _files(tmp_path, n=60, n_test=30)
    services = _services(tmp_path, train, test, policy=NORMALIZING, max_epsilon=0.5)  # ε = 1 is over its cap
    peers, stop = serve_parties(services)
    try:
        code, out, err = run_cli(["vertical", "experts", "--epsilon", "1", "--normalize-rows",
                                  "--backend", "grpc", "--insecure", "--party", train[0], "--test-party", test[0],
                                  *sum((["--peer", f"{n}={a}"] for n, a in peers.items()), []),
                                  "--out", tmp_path / "o"], capsys)
        ledgers = [_ledger(s) for s in services.values()]
    finally:
        stop()
    assert code == 2 and not (tmp_path / "o" / "metrics.json").exists()
    assert "above its operator's cap --max-epsilon 0.5" in " ".join(err.split())
    assert all(led["releases"] == 0 for led in ledgers)


@pytest.mark.parametrize("flags, match", [
    (["--normalize-rows"], "normalize_vertical_rows needs relation 'record'"),
    (["--row-clip", "-1"], "--row-clip must be positive, got --row-clip -1"),
])
def test_party_serve_policy_flags_are_checked_at_start(tmp_path, capsys, flags, match):
    train, _ = _files(tmp_path, n=20, n_test=10)
    code, out, err = run_cli(["party", "serve", "--protocol", "vertical-experts", "--name", "party2", *flags,
                              "--max-epsilon", "1", "--delta", "1e-5", "--data", f"train={train[1]}", "--insecure",
                              "--out", tmp_path / "p2"], capsys)
    assert code == 2
    import re

    assert re.search(match, err), err


def test_multiclass_estimator_over_grpc_equals_in_process_with_k_ary_randomized_response_labels(tmp_path):
    """Four declared classes, label ε = 1 (the k-ary release sent once), ε = 1 per party: each party's ONE multi-output
    release priced by its own policy, and the test probabilities over gRPC equal the in-process ones to 1e-12."""
    from dpadmm import VerticalExpertsMulticlassClassifier

    train, test = _files(tmp_path)
    blocks, _ = _blocks(360)
    rng = np.random.default_rng(3)
    S = np.column_stack([blocks[0][:, 0], blocks[1][:, 0], blocks[2][:, 1], np.zeros(360)]) * 4
    y = np.array(list("abcd"))[np.argmax(S + rng.gumbel(size=S.shape), axis=1)]
    local_blocks = [b[:240] / np.maximum(np.linalg.norm(b[:240], axis=1, keepdims=True), 1e-300) for b in blocks]
    local_test = [b[240:] / np.maximum(np.linalg.norm(b[240:], axis=1, keepdims=True), 1e-300) for b in blocks]
    kw = dict(epsilon=1.0, label_epsilon=1.0, classes=list("abcd"), random_state=7)
    local = VerticalExpertsMulticlassClassifier(**kw, bounds=None, calibrate=False).fit(local_blocks, y[:240])
    services = _services(tmp_path, train, test, policy=NORMALIZING)
    peers, stop = serve_parties(services)
    backend = GrpcBackend(peers, insecure=True, timeout=60)
    try:
        ref = {"index": 2, "normalize": True}
        parties = {n: (PartyData("train", {**ref, "ids": np.arange(240), "n_features": int(d)}),
                       {"test": PartyData("test", {**ref, "ids": 10_000 + np.arange(120), "n_features": int(d)})})
                   for n, d in (("party2", 3), ("party3", 2))}
        remote = VerticalExpertsMulticlassClassifier(**kw).fit_remote(local_blocks[0], y[:240], backend, parties)
        proba = remote.remote_predict_proba(local_test[0], "test")
        backend.close()
    finally:
        stop()
    np.testing.assert_allclose(proba, local.predict_proba(local_test), rtol=1e-12, atol=1e-12)
    assert remote.privacy_.to_dict()["per_party"] == local.privacy_.to_dict()["per_party"]
    assert remote.privacy_.to_dict()["label"] == local.privacy_.to_dict()["label"]
    for name, svc in services.items():  # each party's own account: ONE release, the report's per-party ε
        led = _ledger(svc)
        assert led["releases"] == 1 and led["relation"] == "record_replace"
        assert led["epsilon_spent"] == pytest.approx(remote.privacy_.per_party[name], rel=1e-6)
