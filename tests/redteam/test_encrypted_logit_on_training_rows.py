"""A budgeted party of the encrypted protocol (private work, premise ``honest-label-party`` accepted) answers the
``logit`` request — its un-noised scores ``D̂w`` of a "new records" block declared at Setup — whatever rows that block
holds. The coordinator (the label party) that declares the party's TRAINING rows as the calibration block
(``score={"calibration": <its training rows>}``; deployed: the same file and ids as ``train``) reads every training row's
score exactly after the fit: 40/40 here, ε = ∞ for the features. The accepted premise does not name it (PREMISES:
"encrypts residuals of the declared range and computes its column sums on its clipped block"), and the runtime refuses
the other protocols' scoring requests in a private run ('score', 'rank', REDTEAM_POLICY R6) but not 'logit'.

Fixed: a private party compares the block it is asked to score with its training rows, as it scores them (clipped at
R and quantised like its training block), and refuses ``logit`` on a block holding any of them, naming how many
(:func:`dpadmm.algorithms.encrypted.policy.training_rows_in`). A held-out block (the estimator's calibration split)
is still scored. Residual: rows of the party's files that are in neither block (e.g. outside a PSI intersection) are
not training rows and may be scored when the coordinator names them; their logits are post-processing of the
party's weights applied to a record it holds, as for any new record."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.backends.inprocess import InProcessBackend
from dpadmm.exceptions import ProtocolError
from dpadmm.experiments.audit_games_encrypted import plaintext_he
from dpadmm.algorithms.encrypted import driver
from dpadmm.privacy.policy import PartyPolicy
from dpadmm.runtime.local import PartyOperator


def test_a_budgeted_party_does_not_score_its_training_rows_as_new_records(tmp_path):
    rng = np.random.default_rng(1)
    n = 40
    A0, D = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    y = np.where(rng.random(n) < 0.5, 1, -1)
    specs = driver.specs({"party2": (D, {"calibration": D})}, R=1.0, noise_multiplier=8.0, rounds=2, lam=1e-3,
                         step_size=2.0, forward="encrypted", momentum=0.0, W=1.0, label_W=1.0, label_width=3)
    policy = PartyPolicy(accept_premises=("honest-label-party",), max_epsilon=50.0, delta=1e-5, row_clip=1.0)
    with plaintext_he():
        be = InProcessBackend(policies={"party2": PartyOperator(policy=policy)}, party_dir=tmp_path)
        try:
            be.start(specs, rounds=driver.backend_rounds(2, "encrypted", 1))
            driver.run(be, A0, y, ["party2"], {"party2": 2}, {"party2": 1.0}, R=1.0, label_noise_multiplier=None,
                       rounds=2, lam=1e-3, step_size=2.0, forward="encrypted", W=1.0, label_epsilon=1.0)
            try:
                got = np.asarray(be.request("party2", "logit", "calibration"))
            except ProtocolError as exc:
                assert f"holds {n} of its training rows" in str(exc), str(exc)
                return  # refused: the guarantee holds
            rt = be.hosts["party2"].runtime
            exact = np.asarray(rt.cfg.Q @ rt.state.w).ravel() / 2.0 ** 16  # the training rows' un-noised scores
        finally:
            be.close()
    assert np.sum(got == exact) <= 0.1 * n, int(np.sum(got == exact))



@pytest.mark.parametrize("view", [False, True])
def test_a_held_out_block_is_scored_and_a_view_of_the_training_rows_is_refused(tmp_path, view):
    rng = np.random.default_rng(2)
    n = 30
    A0, D = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    H = D[10:18] if view else rng.normal(size=(8, 2))
    y = np.where(rng.random(n) < 0.5, 1, -1)
    specs = driver.specs({"party2": (D, {"calibration": H})}, R=1.0, noise_multiplier=8.0, rounds=1, lam=1e-3,
                         step_size=2.0, forward="encrypted", momentum=0.0, W=1.0, label_W=1.0, label_width=3)
    policy = PartyPolicy(accept_premises=("honest-label-party",), max_epsilon=50.0, delta=1e-5, row_clip=1.0)
    with plaintext_he():
        be = InProcessBackend(policies={"party2": PartyOperator(policy=policy)}, party_dir=tmp_path)
        try:
            be.start(specs, rounds=driver.backend_rounds(1, "encrypted", 1))
            driver.run(be, A0, y, ["party2"], {"party2": 2}, {"party2": 1.0}, R=1.0, label_noise_multiplier=None,
                       rounds=1, lam=1e-3, step_size=2.0, forward="encrypted", W=1.0, label_epsilon=1.0)
            if view:
                with pytest.raises(ProtocolError, match="holds 8 of its training rows"):
                    be.request("party2", "logit", "calibration")
            else:
                assert np.asarray(be.request("party2", "logit", "calibration")).shape == (8,)
        finally:
            be.close()


@pytest.mark.parametrize("ids, refused", [([5, 6, 7], None), ([5, 1.0, 7], "names 1 of its training rows"),
                                          (None, "its PSI-aligned fit may hold")])
def test_a_reference_to_training_ids_is_refused_at_setup(ids, refused):
    """Deployed: the blocks are references to the party's own files, joined on ids; a new-records reference to the
    training file naming a training id (1.0 is the file's 1) is refused before anything is read or released."""
    from dpadmm.algorithms.encrypted import policy as enc_policy
    from dpadmm.privacy.policy import PolicyRefusal
    from dpadmm.protocol import PartyData

    train = PartyData("train", {"ids": [0, 1, 2, 3, 4], "index": 2, "n_features": 2} if ids is not None else
                      {"psi": True, "index": 2, "n_features": 2})
    new = PartyData("train", {"ids": ids if ids is not None else [9], "index": 2, "n_features": 2})
    args = ["party2", train, {"calibration": new}]
    private = PartyPolicy(accept_premises=("honest-label-party",), max_epsilon=5.0, delta=1e-5)
    if refused is None:
        assert enc_policy.prepare(args, private)[2] == {"calibration": new}
    else:
        with pytest.raises(PolicyRefusal, match=refused):
            enc_policy.prepare(args, private)
