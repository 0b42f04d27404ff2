"""The encrypted vertical protocol (dpadmm.algorithms.encrypted): exactness under HE, the no-noise limit, the
sensitivity bounds on worst-case neighbours, what the label party decrypts, refusals (order, sizes, the missing
extra, the policy). Tests that need sf-heu skip without it (``pip install "dpadmm[he]"``)."""

from __future__ import annotations

import dataclasses

import builtins

import numpy as np
import pytest
import scipy.sparse as sp

from dpadmm.algorithms.encrypted import he, label, masks
from dpadmm.algorithms.encrypted import party as ep
from dpadmm.algorithms.encrypted.policy import ENCRYPTED
from dpadmm.algorithms.encrypted.protocol import PROTOCOL
from dpadmm.exceptions import MissingDependencyError
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal
from dpadmm.protocol import find_protocol


@pytest.fixture
def need_he():
    pytest.importorskip("heu")


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 7))
    X[rng.random(X.shape) < 0.4] = 0.0  # sparse-ish, several distinct values: the bit-plane path
    y = np.where(X @ rng.normal(size=7) + 0.3 * rng.normal(size=n) > 0, 1, -1)
    return [X[:, :3], X[:, 3:5], X[:, 5:]], y


def _sigmoid(s):
    return 1.0 / (1.0 + np.exp(-s))


# ----------------------------------------------------------------------------- without the extra
def test_registered_without_importing_heu():
    assert find_protocol("vertical-encrypted") is PROTOCOL
    assert set(PROTOCOL.types) == set(ep.MESSAGE_TYPES) | {ep.PartyState}  # the state: a hosted party's checkpoint


def test_refuses_without_the_he_extra_with_the_install_command(monkeypatch):
    real = builtins.__import__

    def no_heu(name, *args, **kwargs):
        if name == "heu" or name.startswith("heu."):
            raise ImportError("No module named 'heu'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_heu)
    from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier

    blocks, y = _data()
    with pytest.raises(MissingDependencyError, match=r'pip install "dpadmm\[he\]"'):
        VerticalEncryptedClassifier(rounds=2, forward="clear").fit(blocks, y)
    with pytest.raises(MissingDependencyError, match=r'pip install "dpadmm\[he\]"'):
        ep.setup_party("party2", blocks[1])


def test_every_message_crosses_the_grpc_codec():
    """The declared messages are named arrays and scalars (uint8 arrays for keys and ciphertexts), which the
    gRPC codec carries; raw bytes would not cross it."""
    from dpadmm.backends.grpc_codec import decode, encode

    u8 = np.arange(40, dtype=np.uint8)
    msgs = [ep.Start(u8), ep.Hello(u8[:32], u8), ep.Forward(np.zeros(3), {"party3": u8[:32]}, False),
            ep.Forward(np.zeros(3), None, False, {"party3": u8}),
            ep.Scores(np.arange(4, dtype=np.uint64), None), ep.Scores(None, u8), ep.Backward(u8, u8),
            ep.Backward(u8, u8, {"party3": u8}), ep.EncryptedGradient(u8, None), ep.EncryptedGradient(u8, u8, {"p": u8}),
            ep.Open({"party3": u8}), ep.Opened({"party3": u8[:16]})]
    for m in msgs:
        back = decode(encode(m, PROTOCOL.types), PROTOCOL.types)
        assert type(back) is type(m)
        for a, b in zip(m, back):
            if isinstance(a, dict):
                assert {k: bytes(v) for k, v in a.items()} == {k: bytes(v) for k, v in b.items()}
            elif a is None or isinstance(a, bool):
                assert a == b
            else:
                np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError):
        encode(ep.Start(b"raw bytes"), PROTOCOL.types)


def test_masks_cancel_and_hide_one_share():
    keys = {n: masks.new_key() for n in ("party2", "party3", "party4")}
    pubs = {n: k[1] for n, k in keys.items()}
    vals = {n: np.arange(50, dtype=np.int64) * (i + 1) - 70 for i, n in enumerate(keys)}
    parts = [masks.mask(n, masks.pair_keys(n, keys[n][0], pubs), 3, vals[n]) for n in keys]
    assert np.array_equal(masks.unmask_sum(parts), sum(vals.values()))
    assert not np.array_equal(parts[0].view(np.int64), vals["party2"])


@pytest.mark.slow  # several seconds of key generation and HE (the slow suite runs it)
def test_policy_check_and_price(need_he):
    blocks, _ = _data()
    cfg, _ = ep.setup_party("party2", blocks[1], None, 1.0, 0.2, 7, 1e-4, 2.0, "encrypted", 0.7, 4.0, 1.0, 4.0, 4)
    policy = PartyPolicy(max_epsilon=1.0, delta=1e-5)
    with pytest.raises(PolicyRefusal, match="noise multiplier"):
        ENCRYPTED.check(cfg, (), policy, "party2")
    cfg0, _ = ep.setup_party("party2", blocks[1], None, 1.0, None, 7)
    with pytest.raises(PolicyRefusal, match="a private run"):
        ENCRYPTED.check(cfg0, (), policy, "party2")
    cfg1, _ = ep.setup_party("party2", blocks[1], None, 1.0, 3.0, 7)
    with pytest.raises(PolicyRefusal, match="the forward pass is 'clear'"):  # the label party would read the rows
        ENCRYPTED.check(cfg1, (), policy, "party2")
    assert ENCRYPTED.price(cfg1, 2 * 7 + 2).gaussian == {3.0: 7}  # one release per declared Backward
    assert ENCRYPTED.price(cfg1, 5).gaussian == {3.0: 2}  # no more than the backend rounds allow
    cfg2, _ = ep.setup_party("party2", blocks[1], None, 1.0, 3.0, 7, 1e-4, 2.0, "encrypted", 0.7, 4.0, 1.0, 4.0, 4)
    with pytest.raises(PolicyRefusal, match="honest-but-curious label party, a premise its operator has not accepted"):
        ENCRYPTED.check(cfg2, (), policy, "party2")  # issue 35: the operator accepts the premise explicitly
    ENCRYPTED.check(cfg2, (), dataclasses.replace(policy, accept_premises=("honest-label-party",)), "party2")
    assert ENCRYPTED.price(cfg2, 2 * 7 + 2).gaussian == {3.0: 14}  # two releases per round: D̂ᵀĝ and A₀ᵀs


# ----------------------------------------------------------------------------- HE exactness
@pytest.mark.parametrize("distinct", [pytest.param(3, marks=pytest.mark.slow), 500])  # value groups (slow: 3 s), signed bit planes
def test_column_sums_equal_plaintext(need_he, distinct):
    rng = np.random.default_rng(distinct)
    n, d = 300, 6
    Q = sp.random(n, d, density=0.3, random_state=1, format="csr")
    Q.data = rng.integers(-distinct, distinct + 1, size=Q.nnz).astype(np.float64)
    Q = sp.csr_matrix(Q.astype(np.int64))
    g = rng.integers(-2 ** 24, 2 ** 24 + 1, size=n).astype(np.int64)
    key = he.keygen()
    pub = he.from_public_key(key.public_key())
    ct = pub.column_sums(he.plane_indices(he.value_planes(Q)), pub.load(key.encrypt(g)))
    noise = rng.integers(-10 ** 12, 10 ** 12, size=d)
    got = key.decrypt(pub.add_plain_fresh(ct, noise))
    want = [int(v) for v in (Q.toarray().T.astype(object) @ g.astype(object))]  # exact Python ints
    assert got == [w + int(z) for w, z in zip(want, noise)]


def test_public_key_too_short_is_refused(need_he):
    with pytest.raises(ValueError, match="too short"):
        he.from_public_key(he.keygen(1024).public_key())


def test_quantize_keeps_the_clip():
    rng = np.random.default_rng(2)
    D = rng.normal(size=(50, 4))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    Q = he.quantize(D, ep.BLOCK_BITS).toarray() / 2.0 ** ep.BLOCK_BITS
    assert np.all(np.linalg.norm(Q, axis=1) <= 1.0) and np.allclose(Q, D, atol=2.0 ** -ep.BLOCK_BITS)


# ----------------------------------------------------------------------------- the no-noise limit
@pytest.mark.slow  # several seconds of key generation and HE (the slow suite runs it)
def test_zero_noise_equals_plaintext_gradient_descent(need_he):
    from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier

    blocks, y = _data()
    T, step, lam, R = 6, 4.0, 1e-3, 1.0
    m = VerticalEncryptedClassifier(rounds=T, step=step, lam=lam, row_clip=R, forward="clear", random_state=0).fit(
        blocks, y)
    # the same descent in plaintext on the joint model: the label party's block with its intercept column, the
    # others' blocks clipped and quantised as the parties use them
    from dpadmm.data.prepare import clip_rows

    A = [label.prepare(blocks[0], R)[1].toarray()] + [
        he.quantize(clip_rows(b, R), ep.BLOCK_BITS).toarray() / 2.0 ** ep.BLOCK_BITS for b in blocks[1:]]
    w = [np.zeros(a.shape[1]) for a in A]
    y01 = (y > 0).astype(float)
    n = len(y)
    for _ in range(T):
        g = _sigmoid(sum(a @ v for a, v in zip(A, w))) - y01
        w = [v - step * (a.T @ g / n + lam * v) for a, v in zip(A, w)]
    for got, want in zip(m.coefs_, w):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)  # fixed point: residuals and scores on 2^-24
    assert np.max(np.abs(np.concatenate(w))) > 0.05  # the descent moved


@pytest.mark.slow  # several seconds of key generation and HE (the slow suite runs it)
def test_zero_noise_encrypted_forward_equals_plaintext_taylor_descent(need_he):
    """forward='encrypted': the same heavy-ball descent on the Taylor residual ½ + s/4 − y, weights projected on
    ‖w‖ ≤ W, on the training rows (the held-out calibration rows excluded), quantised blocks."""
    from dpadmm.data.prepare import clip_rows
    from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier

    blocks, y = _data(150)
    blocks = [blocks[0], np.hstack(blocks[1:])]
    T, step, lam, R, mom, W = 6, 2.0, 1e-3, 1.0, 0.7, 0.6
    m = VerticalEncryptedClassifier(rounds=T, step=step, lam=lam, row_clip=R, forward="encrypted", momentum=mom,
                                    weight_bound=W, calibration=0.2, random_state=0).fit(blocks, y)
    n = len(y)
    perm = np.random.default_rng(0).permutation(n)
    tr = np.sort(perm[int(round(0.2 * n)):])
    A = [label.prepare(blocks[0][tr], R)[1].toarray(),
         he.quantize(clip_rows(blocks[1][tr], R), ep.BLOCK_BITS).toarray() / 2.0 ** ep.BLOCK_BITS]
    w = [np.zeros(a.shape[1]) for a in A]
    v = [np.zeros(a.shape[1]) for a in A]
    y01 = (y[tr] > 0).astype(float)
    for _ in range(T):
        g = 0.5 + sum(a @ x for a, x in zip(A, w)) / 4.0 - y01
        for k in range(2):
            v[k] = mom * v[k] + (A[k].T @ g / len(tr) + lam * w[k])
            w[k] = ep.project(w[k] - step * v[k], W)
    for got, want in zip(m.coefs_, w):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert any(np.linalg.norm(x) == pytest.approx(W) for x in w)  # the projection was active
    assert m.calibration_[0] > 0  # the held-out calibration ran


# ----------------------------------------------------------------------------- sensitivity on worst-case neighbours
def test_feature_sensitivity_worst_case():
    """Replace one row of a clipped block, residuals anywhere in [−1, 1]: ‖D̂ᵀg − D̂'ᵀg'‖ ≤ 2R, attained."""
    rng = np.random.default_rng(3)
    R = 1.5
    D = rng.normal(size=(40, 5)) * 3
    from dpadmm.data.prepare import clip_rows

    Dq = he.quantize(clip_rows(D, R), ep.BLOCK_BITS).toarray() / 2.0 ** ep.BLOCK_BITS
    worst = 0.0
    for trial in range(300):
        i = int(rng.integers(40))
        g = rng.uniform(-1, 1, 40)
        g[i] = rng.choice([-1.0, 1.0])
        D2 = Dq.copy()
        D2[i] = -Dq[i] / np.linalg.norm(Dq[i]) * R if trial % 2 else rng.normal(size=5)
        D2 = he.quantize(clip_rows(D2, R), ep.BLOCK_BITS).toarray() / 2.0 ** ep.BLOCK_BITS
        g2 = g.copy()
        g2[i] = g[i] if trial % 3 else -g[i]
        worst = max(worst, float(np.linalg.norm(Dq.T @ g - D2.T @ g2)))
    cfg = ep.PartyConfig("p", None, None, R, 1.0, 1, 1.0, 1.0)
    assert worst <= cfg.sensitivity + 1e-12
    assert worst >= 0.99 * cfg.sensitivity  # the bound is tight (not a loose constant)


def test_label_sensitivity_worst_case():
    """One label flipped: every block's column sums move by that row times 1; ≤ Δ_L = √(2R₀² + Σ R_m²)."""
    rng = np.random.default_rng(4)
    blocks, y = _data(60, 5)
    R = 0.8
    from dpadmm.data.prepare import clip_rows

    cfg, _ = label.setup_label(blocks[0], y, R=R, widths={"party2": 2, "party3": 2}, clips={"party2": R, "party3": R},
                               noise_multiplier=1.0, rounds=1, lam=1.0, step=1.0)
    A = [cfg.A.toarray()] + [clip_rows(b, R) for b in blocks[1:]]
    full = np.hstack(A)
    s = full @ rng.normal(size=full.shape[1])
    worst = 0.0
    for i in range(60):
        y2 = cfg.y01.copy()
        y2[i] = 1 - y2[i]
        dg = (_sigmoid(s) - cfg.y01) - (_sigmoid(s) - y2)
        worst = max(worst, float(np.linalg.norm(full.T @ dg)))
    assert worst <= cfg.sensitivity + 1e-12
    big = np.hstack([np.ones((1, 3)) * 10, np.ones((1, 2)) * 10, np.ones((1, 2)) * 10])  # rows at their clips
    row = np.hstack([label.prepare(big[:, :3], R)[1].toarray(), clip_rows(big[:, 3:5], R), clip_rows(big[:, 5:], R)])
    assert np.linalg.norm(row) == pytest.approx(cfg.sensitivity, rel=1e-4)  # tight (quantised toward zero)


# ----------------------------------------------------------------------------- what the label party decrypts
@pytest.mark.slow  # several seconds of key generation and HE (the slow suite runs it)
def test_label_party_decrypts_only_declared_noisy_gradients(need_he, monkeypatch):
    from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier

    seen = []
    real = he.HeBackend.decrypt

    def spy(self, ct):
        out = real(self, ct)
        seen.append(len(out))
        return out

    monkeypatch.setattr(he.HeBackend, "decrypt", spy)
    blocks, y = _data()
    T = 3
    m = VerticalEncryptedClassifier(rounds=T, epsilon=1.0, label_epsilon=1.0, forward="clear", random_state=1).fit(
        blocks, y)
    assert sorted(seen) == sorted([b.shape[1] for b in blocks[1:]] * T)  # one d_m-vector per party and round
    assert m.privacy_["features"]["epsilon"] == float("inf")  # the forward pass is not covered: said so
    assert m.privacy_["labels"]["epsilon"] <= 1.0 + 1e-6


@pytest.mark.slow  # several seconds of key generation and HE (the slow suite runs it)
def test_label_party_refuses_to_decrypt_an_undeclared_reply(need_he):
    blocks, y = _data()
    key = he.keygen()
    cfg, st = label.setup_label(blocks[0], y, R=1.0, widths={"party2": 2}, clips={"party2": 1.0},
                                noise_multiplier=None, rounds=1, lam=1.0, step=1.0)
    st, blob = label.residuals(cfg, st, key, [])
    # a party echoing the residuals back (n ciphertexts) would have them decrypted: refused, nothing decrypted
    with pytest.raises(PolicyRefusal, match="refused to decrypt 'party2'"):
        label.open_gradients(cfg, st, key, {"party2": ep.EncryptedGradient(blob)}, rng=np.random.default_rng(0))
    with pytest.raises(PolicyRefusal, match="declared parties"):
        label.open_gradients(cfg, st, key, {}, rng=np.random.default_rng(0))


@pytest.mark.slow  # several seconds of key generation and HE (the slow suite runs it)
def test_party_refuses_out_of_order_and_extra_rounds(need_he):
    blocks, y = _data()
    rng = np.random.default_rng(0)
    cfg, st = ep.setup_party("party2", blocks[1], None, 1.0, 2.0, 1)
    with pytest.raises(PolicyRefusal, match="a Backward in phase 'setup'"):
        ep.step(cfg, st, ep.Backward(b""), rng=rng)
    key = he.keygen()
    st, hello, _ = ep.step(cfg, st, ep.Start(key.public_key()), rng=rng)
    assert isinstance(hello, ep.Hello) and len(hello.mask_key) == 32
    st, sc, _ = ep.step(cfg, st, ep.Forward(), rng=rng)
    g = np.zeros(len(y), dtype=np.int64)
    with pytest.raises(PolicyRefusal, match="one per training row"):
        ep.step(cfg, st, ep.Backward(key.encrypt(g[:5])), rng=rng)
    st, eg, ev = ep.step(cfg, st, ep.Backward(key.encrypt(g)), rng=rng)
    assert len(ev) == 1 and ev[0].sensitivity == 2.0 and ev[0].sigma == pytest.approx(4.0)
    with pytest.raises(PolicyRefusal, match="Backward in phase 'forward'"):
        ep.step(cfg, st, ep.Backward(key.encrypt(g)), rng=rng)
    with pytest.raises(PolicyRefusal, match="beyond the 1 declared"):
        ep.step(cfg, st, ep.Forward(np.zeros(2)), rng=rng)
    with pytest.raises(PolicyRefusal, match="2 finite values"):
        ep.step(cfg, st, ep.Forward(None, None, final=True), rng=rng)
    st, out, _ = ep.step(cfg, st, ep.Forward(np.zeros(2), None, final=True), rng=rng)
    assert out is None and st.phase == "done"
    # what left the party: its mask key, one masked/unmasked score vector, one ciphertext blob — never its block
    assert isinstance(sc, ep.Scores) and sc.values.dtype == np.uint64
    assert isinstance(eg, ep.EncryptedGradient) and eg.ciphertexts.dtype == np.uint8


# ----------------------------------------------------------------------------- the command
@pytest.mark.slow  # several seconds of key generation and HE (the slow suite runs it)
def test_cli_protocol_encrypted(need_he, tmp_path, capsys):
    import json

    from conftest import run_cli
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6))
    y = np.where(X @ rng.normal(size=6) + 0.3 * rng.normal(size=200) > 0, 1, -1)
    dump_svmlight_file(X[:150], y[:150], str(tmp_path / "train.svm"))
    dump_svmlight_file(X[150:], y[150:], str(tmp_path / "test.svm"))
    code, out, err = run_cli(["vertical", "encrypted", "--train", tmp_path / "train.svm", "--test", tmp_path / "test.svm",
                              "--parties", "3,3", "--normalize-rows", "--epsilon", "1",
                              "--label-epsilon", "1", "--iterations", "3", "--seed", "0", "--out", tmp_path / "run"],
                             capsys)
    assert code == 0, err
    assert "encrypted (encrypted forward pass)" in out
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["privacy"]["features"]["epsilon"] <= 1.0 + 1e-6 and m["privacy"]["labels"]["epsilon"] <= 1.0 + 1e-6
    assert m["config"]["rounds"] == 3 and "test_log_loss" in m["final"]
    # the premise of the features' guarantee, in the privacy line and metrics.json (issue 35)
    assert "features epsilon = " in out and "against an honest-but-curious label party at delta" in out
    assert m["privacy"]["features"]["premises"] == ["honest-label-party"]
    assert m["privacy"]["features"]["against"] == "against an honest-but-curious label party"
    code, out, err = run_cli(["vertical", "encrypted", "--data", "a9a", "--rho", "1"], capsys)
    assert code == 2 and "--rho belongs to `dpadmm vertical admm`" in (out + err)


def test_docs_list_the_party_and_coordinator_fields():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "algorithms.md").read_text()
    hooks = PROTOCOL.policy
    assert "### `vertical-encrypted`" in doc
    for who, table in (("party", hooks.party), ("coordinator", hooks.coordinator)):
        for field, rule in table.items():
            assert f"| `{field}` | {who} | {rule} |" in doc, field


def test_bad_parameters_name_the_fix(need_he):
    from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier
    from dpadmm.exceptions import InvalidDataError, InvalidParameterError

    blocks, y = _data()
    with pytest.raises(InvalidParameterError, match="forward must be 'clear' or 'encrypted'"):
        VerticalEncryptedClassifier(forward="plain").fit(blocks, y)
    with pytest.raises(InvalidDataError, match="blocks must be a list of at least two party blocks"):
        VerticalEncryptedClassifier().fit(blocks[:1], y)
    with pytest.raises(InvalidParameterError, match="calibration must be in"):
        VerticalEncryptedClassifier(calibration=1.5).fit(blocks[:2], y)
