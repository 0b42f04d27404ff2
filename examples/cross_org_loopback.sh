#!/usr/bin/env bash
# A cross-organisation deployment on one machine (127.0.0.1), every party a separate process.
#
#   examples/cross_org_loopback.sh OUTDIR
#
# 1. provisions a CA and one certificate + key per party (dpadmm provision), plus a second,
#    untrusted CA;
# 2. writes each organisation's own files (a9a split 66/57 by columns: the label party's file holds
#    ids, labels and its 66 features; party 2's file its 57 features);
# 3. starts `dpadmm party serve` per party (mutual TLS, each with its own directory and audit log);
# 4. runs the coordinator (`dpadmm vertical --backend grpc`) and compares with the in-process run;
# 5. checks the refusals: a coordinator certificate from another CA, a pickle, an unknown method,
#    a request for a party's model, monitoring in a private run;
# 6. kills a party mid-run and checks the one-line error names it (and nothing was written);
# 7. runs graph consensus (4 nodes) and functional quantile regression (3 workers) over grpc and
#    compares them with in-process runs (these two route through the coordinator, and their
#    parties accept their data from the coordinator: --accept-coordinator-data);
# and writes OUTDIR/summary.json. Exit code 0 iff every check holds.
set -euo pipefail
OUT=${1:?usage: examples/cross_org_loopback.sh OUTDIR}
PY=${PYTHON:-python3}
ITER=${ITER:-20}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS="$OUT/logs"
mkdir -p "$LOGS"
export MPLBACKEND=Agg GRPC_VERBOSITY=${GRPC_VERBOSITY:-NONE}
dp() { "$PY" -m dpadmm "$@"; }
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# start_party NAME LOGNAME ARGS... : start `dpadmm party serve`, wait for its port, set PORT.
# --no-budget: these parties serve comparisons with in-process runs (non-private or seeded simulations); a
# deployment gives each party its own budget instead (README "Parties in different organisations").
start_party() {
  local name=$1 log="$LOGS/$2.log"; shift 2
  "$PY" -m dpadmm party serve --name "$name" --listen 127.0.0.1:0 --no-budget "$@" >"$log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
  for _ in $(seq 1 600); do
    if grep -qs " serving " "$log"; then
      PORT=$(sed -n 's/.* on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$log" | head -1)
      return 0
    fi
    if ! kill -0 "$LAST_PID" 2>/dev/null; then cat "$log" >&2; return 1; fi
    sleep 0.2
  done
  echo "party $name did not start" >&2
  return 1
}

echo "== 1. certificates"
rm -rf "$OUT/pki" "$OUT/pki-other"
dp provision --parties coordinator,party1,party2,node0,node1,node2,node3,worker1,worker2,worker3 --out "$OUT/pki" >/dev/null
dp provision --parties coordinator,party1,party2 --out "$OUT/pki-other" >/dev/null

echo "== 2. each organisation's own files"
"$PY" - "$OUT" <<'EOF'
import sys
from pathlib import Path
from dpadmm.data.parties import write_party_files
from dpadmm.experiments.vertical import load_vertical_data
out = Path(sys.argv[1])
d = load_vertical_data(bundled=True)  # a9a, parties 66/57
for split, blocks, y in (("train", d.train, d.y), ("test", d.test, d.y_test)):
    p1, p2 = write_party_files(blocks, y, out / "tmp", prefix=split)
    (out / "org1").mkdir(exist_ok=True); (out / "org2").mkdir(exist_ok=True)
    p1.replace(out / "org1" / f"{split}.csv")  # label party: id, y, 66 features
    p2.replace(out / "org2" / f"{split}.csv")  # party 2: id, 57 features
(out / "tmp").rmdir()
EOF

echo "== 3. parties"
start_party party1 party1 --protocol vertical-sharing --requests score,rank,refit --data train="$OUT/org1/train.csv" --data test="$OUT/org1/test.csv" \
  --tls "$OUT/pki/party1" --out "$OUT/org1/party"
P1=$PORT
start_party party2 party2 --protocol vertical-sharing --data train="$OUT/org2/train.csv" --data test="$OUT/org2/test.csv" \
  --tls "$OUT/pki/party2" --out "$OUT/org2/party"
P2=$PORT; P2_PID=$LAST_PID
PEERS=(--peer "party1=127.0.0.1:$P1" --peer "party2=127.0.0.1:$P2")

echo "== 4. vertical over mutual TLS vs in-process"
rm -rf "$OUT/vertical_grpc"
dp vertical --backend grpc "${PEERS[@]}" --tls "$OUT/pki/coordinator" --party "$OUT/org1/train.csv" \
  --test-party "$OUT/org1/test.csv" --iterations "$ITER" --quiet --out "$OUT/vertical_grpc"
"$PY" - "$OUT" "$ITER" <<'EOF'
import json, sys
from pathlib import Path
import numpy as np
from dpadmm.experiments.vertical import load_vertical_data, run_vertical
out, T = Path(sys.argv[1]), int(sys.argv[2])
model, ref = run_vertical(load_vertical_data(bundled=True), iterations=T)  # in-process, same settings
grpc = json.loads((out / "vertical_grpc" / "metrics.json").read_text())
def rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
diffs = {
    "party1_model": rel(np.load(out / "org1/party/model.npz")["coef"], model.coefs_[0]),
    "party2_model": rel(np.load(out / "org2/party/model.npz")["coef"], model.coefs_[1]),
    "objective_history": rel(grpc["history"]["objective"], ref["history"]["objective"]),
    "test_log_loss_history": rel(grpc["history"]["test_log_loss"], ref["history"]["test_log_loss"]),
    "final_test_log_loss": rel(grpc["final"]["test_log_loss"], ref["final"]["test_log_loss"]),
}
(out / "vertical_check.json").write_text(json.dumps({"relative_differences": diffs, "iterations": grpc["final"]["iterations"],
                                                     "test_log_loss": grpc["final"]["test_log_loss"]}, indent=2))
print("vertical max relative difference vs in-process:", max(diffs.values()))
EOF

echo "== 5a. a coordinator certificate from another CA"
set +e
dp vertical --backend grpc "${PEERS[@]}" --tls "$OUT/pki-other/coordinator" --party "$OUT/org1/train.csv" \
  --iterations 2 --quiet --out "$OUT/wrong_ca" 2>"$LOGS/wrong_ca.err" >/dev/null
WRONG_CA_CODE=$?
set -e
cat "$LOGS/wrong_ca.err"

echo "== 5b. forbidden requests (pickle, unknown method, the model, monitoring in a private run)"
"$PY" - "$OUT" "$P1" "$P2" <<'EOF'
import json, pickle, sys
from pathlib import Path
import grpc
from dpadmm.algorithms import vertical_sharing as vs
from dpadmm.backends import PartySpec
from dpadmm.backends import grpc_codec as codec
from dpadmm.backends.grpc_backend import GrpcBackend
from dpadmm.backends.grpc_tls import TLSFiles
from dpadmm.cli.party import vertical_remote_data
from dpadmm.exceptions import ProtocolError
from dpadmm.kernels.regularizers import L2
out, p1, p2 = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
tls = TLSFiles.load(tls_dir=out / "pki" / "coordinator")
be = GrpcBackend({"party1": f"127.0.0.1:{p1}", "party2": f"127.0.0.1:{p2}"}, tls=tls)
data = vertical_remote_data(be, [out / "org1/train.csv"], [], normalize=True)
priv = vs.PrivacySpec(noise_multiplier=1.0, bounds=vs.Bounds(26.0, 540.0, 540.0), n_parties=2)
specs = [PartySpec(n, vs.setup_party, (n, B, {"lam_sum": 32.561, "reg": L2(), "private": priv, "bound": 26.0,
                                              "require_unit_rows": True}), vs.party_step, vs.party_diagnostics)
         for n, B in zip(("party1", "party2"), data.train)]
be.start(specs)
checks = {}
ch = grpc.secure_channel(f"127.0.0.1:{p1}", grpc.ssl_channel_credentials(tls.ca, tls.key, tls.cert),
                         options=[("grpc.ssl_target_name_override", "party1")])
try:
    ch.unary_unary("/dpadmm.Party/Step")(pickle.dumps({"round": 0}), timeout=10)
    checks["pickle"] = "accepted"
except grpc.RpcError as e:
    checks["pickle"] = f"{e.code().name}: {e.details()}"
try:
    ch.unary_unary("/dpadmm.Party/Call")(codec.encode({"function": "fetch_model"}), timeout=10)
    checks["unknown_method"] = "accepted"
except grpc.RpcError as e:
    checks["unknown_method"] = f"{e.code().name}: {e.details()}"
for what, fn in (("model", lambda: be.request("party1", "coef")), ("exec", lambda: be.request("party2", "exec", "rm -rf /")),
                 ("monitoring_private", be.diagnose)):
    try:
        fn()
        checks[what] = "accepted"
    except ProtocolError as e:
        checks[what] = f"refused: {e}"
be._failed = True  # no final model for this probe
be.close()
ok = (checks["pickle"].startswith("INVALID_ARGUMENT") and "pickle" in checks["pickle"]
      and checks["unknown_method"].startswith("UNIMPLEMENTED")
      and all(checks[k].startswith("refused") for k in ("model", "exec", "monitoring_private")))
(out / "forbidden_check.json").write_text(json.dumps({"refused": ok, "answers": checks}, indent=2))
for k, v in checks.items():
    print(f"  {k}: {v}")
EOF

echo "== 6. a party killed mid-run"
rm -rf "$OUT/killed_run"
BEFORE=$(grep -c '"method": "Step"' "$OUT/org2/party/audit.jsonl" || true)
set +e
dp vertical --backend grpc "${PEERS[@]}" --tls "$OUT/pki/coordinator" --party "$OUT/org1/train.csv" \
  --iterations 100000 --noise-scale 1 --normalize-rows --quiet --timeout 20 --out "$OUT/killed_run" \
  2>"$LOGS/killed.err" >/dev/null &
COORD=$!
for _ in $(seq 1 600); do
  n=$(grep -c '"method": "Step"' "$OUT/org2/party/audit.jsonl" 2>/dev/null || true)
  [ "${n:-0}" -ge $((BEFORE + 5)) ] && break
  sleep 0.2
done
KILL_T0=$(date +%s)
kill -9 "$P2_PID"
wait "$COORD"
KILLED_CODE=$?
KILL_SECONDS=$(( $(date +%s) - KILL_T0 ))
set -e
cat "$LOGS/killed.err"

echo "== 7a. graph consensus, 4 nodes, over grpc vs in-process"
CPEERS=()
for i in 0 1 2 3; do
  start_party "node$i" "node$i" --protocol graph-consensus --accept-coordinator-data --allow-seeded-noise --tls "$OUT/pki/node$i" \
    --out "$OUT/nodes/node$i"
  CPEERS+=(--peer "node$i=127.0.0.1:$PORT")
done
rm -rf "$OUT/consensus_grpc" "$OUT/consensus_inprocess"
dp consensus --backend grpc "${CPEERS[@]}" --tls "$OUT/pki/coordinator" --nodes 4 --iterations 10 --seed 0 --quiet \
  --out "$OUT/consensus_grpc" >/dev/null
dp consensus --nodes 4 --iterations 10 --seed 0 --quiet --out "$OUT/consensus_inprocess" >/dev/null

echo "== 7b. functional quantile regression, 3 workers, over grpc vs in-process"
FPEERS=()
for i in 1 2 3; do
  start_party "worker$i" "worker$i" --protocol functional-quantile --protocol functional-statistics --accept-coordinator-data --allow-seeded-noise --tls "$OUT/pki/worker$i" \
    --out "$OUT/workers/worker$i"
  FPEERS+=(--peer "worker$i=127.0.0.1:$PORT")
done
rm -rf "$OUT/functional_grpc" "$OUT/functional_inprocess"
dp functional --backend grpc "${FPEERS[@]}" --tls "$OUT/pki/coordinator" --simulate --n 600 --workers 3 \
  --iterations 40 --seed 0 --quiet --out "$OUT/functional_grpc" >/dev/null
dp functional --simulate --n 600 --workers 3 --iterations 40 --seed 0 --quiet --out "$OUT/functional_inprocess" >/dev/null

echo "== summary"
"$PY" - "$OUT" "$WRONG_CA_CODE" "$KILLED_CODE" "$KILL_SECONDS" <<'EOF'
import json, sys
from pathlib import Path
import numpy as np
out, wrong_code, killed_code, kill_s = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def leaves(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from leaves(v)
    elif isinstance(x, list):
        for v in x:
            yield from leaves(v)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield float(x)
def max_rel(a, b):
    a, b = np.array(list(leaves(a))), np.array(list(leaves(b)))
    if a.shape != b.shape or a.size == 0:
        return float("inf")
    fin = np.isfinite(b)
    if not np.array_equal(np.isfinite(a), fin):
        return float("inf")
    return float(np.max(np.abs(a[fin] - b[fin]) / np.maximum(np.abs(b[fin]), 1e-12), initial=0.0))
v = json.loads((out / "vertical_check.json").read_text())
wrong_err = (out / "logs" / "wrong_ca.err").read_text().strip().splitlines()
killed_err = (out / "logs" / "killed.err").read_text().strip().splitlines()
cg, ci = (json.loads((out / d / "metrics.json").read_text()) for d in ("consensus_grpc", "consensus_inprocess"))
fg, fi = (json.loads((out / d / "metrics.json").read_text()) for d in ("functional_grpc", "functional_inprocess"))
TIMING = ("seconds", "wall_seconds", "fit_seconds")  # wall-clock fields differ between any two runs
consensus_diff = max_rel({k: v for k, v in cg["history"].items() if k not in TIMING},
                         {k: v for k, v in ci["history"].items() if k not in TIMING})
fkeys = [k for k, x in fi["final"].items()
         if isinstance(x, (int, float)) and not isinstance(x, bool) and k not in TIMING]
functional_diff = max(max_rel(fg["final"][k], fi["final"][k]) for k in fkeys)
beta_g = np.loadtxt(out / "functional_grpc" / "beta.csv", delimiter=",", skiprows=1)
beta_i = np.loadtxt(out / "functional_inprocess" / "beta.csv", delimiter=",", skiprows=1)
functional_diff = max(functional_diff, float(np.max(np.abs(beta_g - beta_i)) / np.max(np.abs(beta_i))))
summary = {
    "vertical_max_rel_diff_vs_inprocess": max(v["relative_differences"].values()),
    "vertical_relative_differences": v["relative_differences"],
    "wrong_ca_refused": wrong_code == 2 and len(wrong_err) == 1 and "party 'party1' failed: TLS handshake" in wrong_err[0],
    "forbidden_request_refused": json.loads((out / "forbidden_check.json").read_text())["refused"],
    "killed_party_named": killed_code == 2 and len(killed_err) == 1 and "party 'party2'" in killed_err[0]
                          and kill_s <= 20 + 5 and not (out / "killed_run").exists(),
    "killed_party_seconds_to_error": kill_s,
    "consensus_ok": bool(consensus_diff <= 1e-9),
    "consensus_max_rel_diff_vs_inprocess": consensus_diff,
    "functional_ok": bool(functional_diff <= 1e-9),
    "functional_max_rel_diff_vs_inprocess": functional_diff,
    "errors": {"wrong_ca": wrong_err, "killed": killed_err},
    "topology": "parties listen (one inbound port each), the coordinator dials; consensus and functional messages "
                "route through the coordinator; their parties accepted their data from the coordinator "
                "(--accept-coordinator-data), the vertical parties read their own files",
}
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps({k: summary[k] for k in ("vertical_max_rel_diff_vs_inprocess", "wrong_ca_refused",
                                          "forbidden_request_refused", "killed_party_named", "consensus_ok",
                                          "functional_ok")}, indent=2))
ok = (summary["vertical_max_rel_diff_vs_inprocess"] <= 1e-9 and summary["wrong_ca_refused"]
      and summary["forbidden_request_refused"] and summary["killed_party_named"] and summary["consensus_ok"]
      and summary["functional_ok"])
sys.exit(0 if ok else 1)
EOF
