#!/usr/bin/env bash
# The two-organisation walkthrough of docs/tutorials/two-organisations.md, as it is written, on one machine.
#
#   examples/two_organisations.sh OUTDIR
#
# A bank (the labels and 66 features of a9a) and a retailer (57 features) each work in their own directory,
# OUTDIR/bank and OUTDIR/retailer; each knows only its own customer list, and the lists overlap in part.
# Every `dpadmm` command below runs in one of the two directories, on that organisation's files only (the
# only things that cross are the retailer's certificate request, its signed certificate and the CA
# certificate). Steps: 0. each side's files; 1. certificates (the retailer keeps its key: CSR flow);
# 2. the retailer serves the experts protocol with PSI, under its own budget; 3. the bank trains (experts,
# PSI); 4. the retailer scores the bank's new customers with the model it kept; 5. a fit over the retailer's
# budget is refused before anything is released; 6. ADMM sharing with checkpoints, the retailer killed mid-run,
# restarted, and the run resumed. Exit code 0 iff every step did what the tutorial says; OUTDIR/summary.json
# holds the figures. The parties listen on 127.0.0.1 (port 0: the OS picks a free one; the tutorial's fixed
# ports are the deployment's).
set -euo pipefail
OUT=${1:?usage: examples/two_organisations.sh OUTDIR}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BANK="$OUT/bank"
RETAILER="$OUT/retailer"
rm -rf "$BANK" "$RETAILER"
mkdir -p "$BANK" "$RETAILER"
export MPLBACKEND=Agg GRPC_VERBOSITY=${GRPC_VERBOSITY:-NONE}
dpadmm() { "$PY" -m dpadmm "$@"; }
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# serve LOG ARGS... : start `dpadmm party serve ARGS` in the current directory, wait until it listens; sets PORT, PID.
# Each organisation keeps its budgets (one per data set, shared by all its servers) in its ledger store,
# ./ledger-store/ledger.db, verified with the operator's key ./keys/ledger.key (made with the store on first use;
# a real operator keeps it on another disk or host).
serve() {
  local log=$1; shift
  "$PY" -m dpadmm party serve "$@" --ledger sqlite:///ledger-store/ledger.db --ledger-key keys/ledger.key --listen 127.0.0.1:0 >"$log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 900); do
    if grep -qs " serving " "$log"; then
      PORT=$(sed -n 's/.* on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$log" | head -1)
      return 0
    fi
    if ! kill -0 "$PID" 2>/dev/null; then cat "$log" >&2; return 1; fi
    sleep 0.2
  done
  echo "party did not start: $log" >&2
  return 1
}

echo "== 0. each organisation's own files (a9a split 66/57; partly overlapping customer lists)"
"$PY" - "$BANK" "$RETAILER" <<'EOF'
import sys
from pathlib import Path
import numpy as np, pandas as pd
from dpadmm.experiments.vertical import load_vertical_data
bank, retailer = Path(sys.argv[1]), Path(sys.argv[2])
d = load_vertical_data(bundled=True)
dense = lambda B: B.toarray() if hasattr(B, "toarray") else np.asarray(B)
rng = np.random.default_rng(0)
# customer numbers: training and test customers the two hold (overlapping in part), and new customers to score
spans = {"train": ((0, 6000), (1500, 7000)), "test": ((0, 3000), (500, 3500)), "new": ((3000, 4500), (3300, 5000))}
for split, (a0, a1), (b0, b1) in ((s, *spans[s]) for s in spans):
    blocks, y = (d.train, d.y) if split == "train" else (d.test, d.y_test)
    B1, B2 = dense(blocks[0]), dense(blocks[1])
    ids = np.array([f"c{split[:2]}{i:06d}" for i in range(B1.shape[0])])
    a, b = rng.permutation(np.arange(a0, a1)), rng.permutation(np.arange(b0, b1))
    bk = pd.DataFrame(B1[a], columns=[f"f{j}" for j in range(B1.shape[1])]); bk.insert(0, "id", ids[a]); bk.insert(1, "y", y[a])
    rt = pd.DataFrame(B2[b], columns=[f"g{j}" for j in range(B2.shape[1])]); rt.insert(0, "id", ids[b])
    bk.to_csv(bank / f"{split}.csv", index=False)
    rt.to_csv(retailer / f"{split}.csv", index=False)
EOF

echo "== 1. certificates: the bank runs the CA; the retailer keeps its key (CSR flow)"
# --- step 1
cd "$BANK"
dpadmm provision --parties coordinator,party1 --out pki             # the CA and the bank's two identities
cd "$RETAILER"
dpadmm party request --name party2 --out tls                         # the retailer's key and request
cd "$BANK"
dpadmm provision --csr "$RETAILER/tls/party2.csr" --out pki          # the bank's CA signs the request
cp pki/party2/cert.pem pki/ca.pem "$RETAILER/tls/"                   # the certificates go back; the key never moved
# --- end step 1

echo "== 2. the retailer serves the experts protocol and PSI under its own budget"
# --- step 2
cd "$RETAILER"
serve serve-experts.log --name party2 --protocol vertical-experts --protocol psi-align --relation record \
    --normalize-rows --data train=train.csv --data test=test.csv --max-epsilon 8 --delta 1e-5 \
    --tls tls --allow coordinator --out state
# --- end step 2
RPID=$PID

echo "== 3. the bank trains: PSI on the id columns, then the experts protocol at ε = 1"
# --- step 3
cd "$BANK"
dpadmm vertical --protocol experts --backend grpc --psi --tls pki/coordinator --peer party2=127.0.0.1:$PORT \
    --party train.csv --test-party test.csv --normalize-rows --epsilon 1 --quiet --out run-experts | tee experts.txt
# --- end step 3
kill "$RPID"; wait "$RPID" 2>/dev/null || true

echo "== 4. new customers: the retailer scores them with the model it kept (the same --out: one ledger)"
# --- step 4
cd "$RETAILER"
serve serve-scoring.log --name party2 --protocol vertical-experts --protocol psi-align --relation record \
    --normalize-rows --data train=train.csv --data new=new.csv --data model=state/model.npz \
    --max-epsilon 8 --delta 1e-5 --tls tls --allow coordinator --out state
cd "$BANK"
dpadmm score --psi --tls pki/coordinator --peer party2=127.0.0.1:$PORT --party new.csv --model run-experts \
    --out scores | tee scores.txt
# --- end step 4
kill "$PID"; wait "$PID" 2>/dev/null || true

echo "== 5. a run over the retailer's budget is refused before anything is released"
cd "$RETAILER"
serve serve-refuse.log --name party2 --protocol vertical-experts --protocol psi-align --relation record \
    --normalize-rows --data train=train.csv --data test=test.csv --max-epsilon 8 --delta 1e-5 \
    --tls tls --allow coordinator --out state
RPID=$PID
# --- step 5
cd "$BANK"
dpadmm vertical --protocol experts --backend grpc --psi --tls pki/coordinator --peer party2=127.0.0.1:$PORT \
    --party train.csv --test-party test.csv --normalize-rows --epsilon 8 --quiet --out run-too-much \
    2> refused.txt && { echo "the over-budget run was not refused" >&2; exit 1; }
cat refused.txt
# --- end step 5
kill "$RPID"; wait "$RPID" 2>/dev/null || true

echo "== 6. ADMM sharing with checkpoints; the retailer is killed mid-run, restarts, and the run resumes"
# --- step 6
cd "$BANK"
serve serve-sharing.log --name party1 --protocol vertical-sharing --protocol psi-align --requests score,rank,refit \
    --relation record --normalize-rows --data train=train.csv --data test=test.csv --max-epsilon 8 --delta 1e-5 \
    --tls pki/party1 --out state
BANK_PORT=$PORT
cd "$RETAILER"
serve serve-sharing.log --name party2 --protocol vertical-sharing --protocol psi-align --relation record \
    --normalize-rows --data train=train.csv --data test=test.csv --max-epsilon 8 --delta 1e-5 --tls tls --out state
RPID=$PID
cd "$BANK"
BEFORE=$(grep -c '"method": "Step"' "$RETAILER/state/audit.jsonl" || true)
dpadmm vertical --backend grpc --psi --tls pki/coordinator --peer party1=127.0.0.1:$BANK_PORT \
    --peer party2=127.0.0.1:$PORT --party train.csv --test-party test.csv --relation record --normalize-rows \
    --epsilon 2 --delta 1e-5 --iterations 400 --checkpoint-every 5 --timeout 30 --quiet --out run-sharing 2> killed.txt &
COORD=$!
# ... the retailer's machine goes down after its tenth round of this run (400 rounds: the kill lands mid-run):
until [ "$(grep -c '"method": "Step"' "$RETAILER/state/audit.jsonl" || true)" -ge $((BEFORE + 10)) ]; do
  kill -0 "$COORD" 2>/dev/null || { cat killed.txt >&2; exit 1; }   # the run ended before round 10
  sleep 0.05
done
kill -9 "$RPID"
wait "$COORD" && { echo "the run did not notice the retailer was gone" >&2; exit 1; }
cat killed.txt                                       # error: party 'party2' failed in round …
cd "$RETAILER"                                       # the retailer restarts, same --out (its checkpoint and ledger)
serve serve-sharing-2.log --name party2 --protocol vertical-sharing --protocol psi-align --relation record \
    --normalize-rows --data train=train.csv --data test=test.csv --max-epsilon 8 --delta 1e-5 --tls tls --out state
cd "$BANK"
dpadmm vertical --backend grpc --psi --tls pki/coordinator --peer party1=127.0.0.1:$BANK_PORT \
    --peer party2=127.0.0.1:$PORT --party train.csv --test-party test.csv --relation record --normalize-rows \
    --epsilon 2 --delta 1e-5 --iterations 400 --checkpoint-every 5 --timeout 30 --quiet --resume run-sharing \
    --out run-sharing | tee resumed.txt
# --- end step 6

"$PY" - "$BANK" "$RETAILER" "$OUT/summary.json" <<'EOF'
import json, sys
from pathlib import Path
import pandas as pd
bank, retailer, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
experts = json.loads((bank / "run-experts" / "metrics.json").read_text())
sharing = json.loads((bank / "run-sharing" / "metrics.json").read_text())
import subprocess
listing = subprocess.run([sys.executable, "-m", "dpadmm", "party", "ledger", "--ledger",
                          f"sqlite:///{(retailer / 'ledger-store' / 'ledger.db').resolve()}", "--ledger-key",
                          str(retailer / "keys" / "ledger.key"), "--data", str(retailer / "train.csv"), "--json"],
                         capture_output=True, text=True, check=True)
ledger = json.loads(listing.stdout)[0]  # the retailer's ledger of retail_train.csv (one per data set)
preds = pd.read_csv(bank / "scores" / "predictions.csv")
common_new = set(pd.read_csv(bank / "new.csv").id) & set(pd.read_csv(retailer / "new.csv").id)
refused = (bank / "refused.txt").read_text()
summary = {
    "psi_rows": experts["config"]["psi"]["train"]["rows"],
    "experts_test_log_loss": experts["final"]["test_log_loss"],
    "label_party_alone_test_log_loss": experts["baselines"]["label_party_alone"]["test_log_loss"],
    "experts_retailer_epsilon": experts["privacy"]["per_party"]["party2"],
    "scored_rows": len(preds), "new_customers_both_hold": len(common_new),
    "refused_over_budget": "refused the run at Setup" in refused,
    "killed_run_error": "party 'party2' failed" in (bank / "killed.txt").read_text(),
    "resumed_iterations": sharing["final"]["iterations"],
    "resumed_label_party_choice": sharing["final"]["label_party_choice"],
    "resumed_epsilon_per_party": sharing["privacy"]["per_party"],
    "retailer_ledger_epsilon": ledger.get("epsilon_spent"),
}
out.write_text(json.dumps(summary, indent=2))
print(json.dumps(summary, indent=2))
ok = (summary["psi_rows"] == 4500 and summary["scored_rows"] == len(common_new) and summary["refused_over_budget"]
      and summary["killed_run_error"] and summary["resumed_iterations"] == 400
      and summary["experts_test_log_loss"] < summary["label_party_alone_test_log_loss"]
      and summary["retailer_ledger_epsilon"] is not None and summary["retailer_ledger_epsilon"] <= 8
      # at least the run's 2; more when a party released rounds after the last checkpoint before the crash
      and min(summary["resumed_epsilon_per_party"].values()) >= 2 - 1e-3)
sys.exit(0 if ok else 1)
EOF
