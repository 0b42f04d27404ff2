"""Setups are named, typed records (issue 25, item 3): the codec carries a Setup as {field → value} (never a pickle,
never a positional list), the party checks it against its protocol's declared Setup type, and a party spec refers
to its protocol declaration (``PartySpec.of``)."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import numpy as np
import pytest

from dpadmm.algorithms.experts.messages import Setup as ExpertsSetup
from dpadmm.algorithms.experts.protocol import PROTOCOL as EXPERTS
from dpadmm.algorithms.vertical.protocol import SGD_PROTOCOL
from dpadmm.backends import InProcessBackend, PartySpec
from dpadmm.backends.selftest import PROTOCOL as SELFTEST, Broadcast, toy_setup, toy_step
from dpadmm.exceptions import InvalidParameterError, ProtocolError
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal
from dpadmm.protocol import (POSITIONAL_SPEC, PartyData, check_request_arguments, check_setup, find_protocol,
                            protocol_for, protocol_names, protocol_of, request_arguments, setup_fields)
from dpadmm.runtime import PartyRuntime, codec

TOY = SELFTEST.setup_type


def test_every_declared_protocol_has_a_named_setup_record_matching_its_setup_function():
    for name in protocol_names():
        proto = find_protocol(name)
        params = inspect.signature(proto.setup).parameters
        assert proto.setup_type._fields == tuple(params), name
        assert proto.setup_type._field_defaults == {k: p.default for k, p in params.items()
                                                    if p.default is not inspect.Parameter.empty}, name


def test_the_codec_carries_a_setup_record_by_name_and_back():
    rec = ExpertsSetup(name="party2", train=PartyData("train", {"ids": np.arange(3)}), R=1.0, noise_multiplier=4.0)
    blob = codec.encode({"setup": setup_fields(EXPERTS, rec)})
    assert b"\x80" != blob[:1] and b'"noise_multiplier"' in blob  # field names in the header, no pickle
    back = check_setup(ExpertsSetup, codec.decode(blob)["setup"])
    assert type(back) is ExpertsSetup and back.noise_multiplier == 4.0 and back.train.key == "train"
    np.testing.assert_array_equal(back.train.params["ids"], np.arange(3))


@pytest.mark.parametrize("fields, message", [
    ({"name": "p", "train": None, "rho": 1.0}, r"^setup field 'rho' is not a field of .*experts.messages.Setup \(name, "
                                               r"train, .*\); send the declared fields only$"),
    ({"name": "p"}, r"^setup field 'train' of .*experts.messages.Setup is missing \(required: name, train\)$"),
    ({"name": "p", "train": None, "R": "1e9"}, r"^setup field 'R' of .*experts.messages.Setup must be float, got str$"),
    ({"name": 3, "train": None}, r"^setup field 'name' of .*experts.messages.Setup must be str, got int$"),
    ({"name": "p", "train": None, "noise_multiplier": True},
     r"^setup field 'noise_multiplier' of .*experts.messages.Setup must be float \| None, got bool$"),
    (["p", None], r"^the setup must be a mapping of .*experts.messages.Setup's fields by name"),
])
def test_a_setup_record_off_its_declaration_is_refused_naming_the_field(fields, message):
    with pytest.raises(ProtocolError, match=message):
        check_setup(ExpertsSetup, fields)


def test_a_setup_that_departs_from_the_declaration_is_refused_at_the_party_and_audited(tmp_path):
    rt = PartyRuntime(name="p1", protocol=SELFTEST, data={}, out=tmp_path, allow_seeded_noise=True)
    base = {"protocol": "selftest", "party": "p1", "index": 0, "noise_seed": 0}
    try:
        with pytest.raises(PolicyRefusal, match=r"^party 'p1' refused Setup: setup field 'size' of "
                                                r".*ToySetup must be int, got str$"):
            rt.call("Setup", dict(base, setup={"name": "p1", "size": "3"}))
        with pytest.raises(PolicyRefusal, match=r"^party 'p1' refused Setup: it carries no 'setup' record \(positional "
                                                r"'args' are not accepted\); send the fields of ToySetup by name"):
            rt.call("Setup", dict(base, args=["p1", 3]))
        assert rt.cfg is None
    finally:
        rt.close()
    lines = rt.audit_path.read_text().splitlines()
    assert "setup field 'size'" in lines[-2] and "positional 'args'" in lines[-1]


def test_a_party_spec_refers_to_its_protocol_and_runs_the_same_numbers_as_the_positional_form():
    spec = PartySpec.of(SELFTEST, "p1", TOY(name="p1", size=3, noise=0.5))
    assert spec.protocol is SELFTEST and protocol_for(spec) is SELFTEST and type(spec.setup_args) is TOY
    with pytest.warns(DeprecationWarning, match=FIX):
        old = PartySpec("p1", toy_setup, ("p1", 3, 0.5), toy_step)  # the deprecated form: matched by its step
    assert protocol_for(old) is SELFTEST  # matched to its declaration once, when it was built
    outs = []
    for s in (spec, old):
        be = InProcessBackend()
        be.start([s], noise_seed=7)
        outs.append(be.step({"p1": Broadcast(0, np.zeros(3))}, 0)["p1"][0])
        be.close()
    np.testing.assert_array_equal(outs[0].x, outs[1].x)
    with pytest.raises(ProtocolError, match="setup field 'size' of .* must be int, got float"):
        PartySpec.of(SELFTEST, "p1", {"name": "p1", "size": 3.5})


FIX = r"build it as PartySpec\.of\(PROTOCOL, name, Setup\(\.\.\.\)\)"


def test_a_positional_party_spec_is_deprecated_and_the_warning_names_the_fix():
    with pytest.warns(DeprecationWarning) as caught:
        PartySpec("p1", toy_setup, ("p1", 3), toy_step)
    assert [str(w.message) for w in caught] == [POSITIONAL_SPEC]
    assert caught[0].filename == __file__  # reported at the caller's line, not inside the library
    assert POSITIONAL_SPEC.startswith("a PartySpec built positionally, PartySpec(name, setup, args, step, ...), "
                                      "without its protocol declaration is deprecated; build it as "
                                      "PartySpec.of(PROTOCOL, name, Setup(...))")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the declared form warns of nothing, and neither does its lookup
        spec = PartySpec.of(SELFTEST, "p1", TOY(name="p1", size=3))
        assert protocol_for(spec) is SELFTEST and protocol_for(dataclasses.replace(spec, owner="p1")) is SELFTEST


def test_the_fallback_to_matching_a_spec_by_its_step_is_deprecated_with_the_same_fix():
    class Unpickled:  # a spec of an older release (no declaration), as a checkpoint or a caller may hold one
        step = staticmethod(toy_step)

    with pytest.warns(DeprecationWarning, match=FIX):
        assert protocol_for(Unpickled()) is SELFTEST
    with pytest.warns(DeprecationWarning, match=FIX):
        assert protocol_of(toy_step) is SELFTEST


def test_a_party_spec_answers_its_protocol_s_requests_unless_a_simulation_names_its_own():
    assert PartySpec.of(SELFTEST, "p1", TOY(name="p1", size=3)).handlers == dict(SELFTEST.handlers)
    own = PartySpec.of(SELFTEST, "p1", TOY(name="p1", size=3), handlers={"coef": toy_step})
    assert own.handlers == {"coef": toy_step} and own.protocol.name == "selftest" and own.protocol.step is SELFTEST.step


def test_a_party_under_its_operator_s_policy_serves_only_a_registered_declaration(tmp_path):
    """The SGD baseline's declaration is for simulations (not registered): no ``dpadmm party serve`` could run it, so
    neither does a hosted party with a policy; the plain simulation runs it."""
    spec = PartySpec.of(SGD_PROTOCOL, "party1", SGD_PROTOCOL.setup_type(name="party1", D=np.eye(3),
                                                                        options={"lam": 0.1}))
    be = InProcessBackend(policies={"party1": PartyPolicy()}, party_dir=tmp_path)
    try:
        with pytest.raises(InvalidParameterError, match=r"^protocol 'vertical-sgd' is declared for simulations only, "
                                                        r"so no party serves it \(over the network or under a policy\)"):
            be.start([spec])
    finally:
        be.close()
    plain = InProcessBackend()
    plain.start([spec])
    plain.close()


def test_a_request_carries_its_arguments_by_the_handler_s_parameter_names():
    psi = find_protocol("psi-align")
    assert request_arguments(psi.handlers["align"], [np.arange(3)]).keys() == {"common"}
    assert request_arguments(None, ["anything"]) == {}  # an undeclared handler: the party refuses it by name
    with pytest.raises(ProtocolError, match=r"^request 'align' takes at most 1 arguments \(common\), got 2$"):
        request_arguments(psi.handlers["align"], [1, 2])
    with pytest.raises(ProtocolError, match=r"^request 'align''s argument 'common' is missing$"):
        check_request_arguments(psi.handlers["align"], "align", {})
    with pytest.raises(ProtocolError, match=r"^request 'align' has no argument 'ids' \(its arguments: common\)$"):
        check_request_arguments(psi.handlers["align"], "align", {"common": [], "ids": []})
