#!/usr/bin/env bash
# GENERATED from docs/tutorials/two-organisations.md: edit the page, then run
#   python tests/docs/test_two_organisations.py --write
# The page's bash blocks one after another, on one machine:
#   examples/two_organisations.sh DIR      (an empty directory: the retailer's ledger remembers earlier runs)
# BANK_PORT and RETAILER_PORT (default 7101 and 7102) choose the two party servers' ports.
set -euo pipefail
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT    # the party servers still running if a step fails

# docs/tutorials/two-organisations.md, line 20
WORK=$(mkdir -p "${1:?usage: examples/two_organisations.sh DIR}" && cd "$1" && pwd)            # everything below goes here
BANK=$WORK/bank                       # the bank's directory: its files, its CA, its runs
RETAILER=$WORK/retailer               # the retailer's directory: its files, its key, its ledger
BANK_PORT=${BANK_PORT:-7101}                        # the bank's own party server (step 6)
RETAILER_PORT=${RETAILER_PORT:-7102}                    # the retailer's party server
mkdir -p "$BANK" "$RETAILER"

# docs/tutorials/two-organisations.md, line 33
python3 - "$BANK" "$RETAILER" <<'EOF'
import sys
from pathlib import Path
import numpy as np, pandas as pd
from dpadmm.data.vertical import load_vertical_data
bank, retailer = Path(sys.argv[1]), Path(sys.argv[2])
d = load_vertical_data(bundled=True)
dense = lambda B: B.toarray() if hasattr(B, "toarray") else np.asarray(B)
rng = np.random.default_rng(0)
# customer numbers each side holds (overlapping in part): training, test, and new customers to score
spans = {"train": ((0, 6000), (1500, 7000)), "test": ((0, 3000), (500, 3500)), "new": ((3000, 4500), (3300, 5000))}
for split, ((a0, a1), (b0, b1)) in spans.items():
    blocks, y = (d.train, d.y) if split == "train" else (d.test, d.y_test)
    B1, B2 = dense(blocks[0]), dense(blocks[1])
    ids = np.array([f"c{split[:2]}{i:06d}" for i in range(B1.shape[0])])
    a, b = rng.permutation(np.arange(a0, a1)), rng.permutation(np.arange(b0, b1))
    bk = pd.DataFrame(B1[a], columns=[f"f{j}" for j in range(B1.shape[1])])
    bk.insert(0, "id", ids[a]); bk.insert(1, "y", y[a])
    rt = pd.DataFrame(B2[b], columns=[f"g{j}" for j in range(B2.shape[1])])
    rt.insert(0, "id", ids[b])
    bk.to_csv(bank / f"{split}.csv", index=False)
    rt.to_csv(retailer / f"{split}.csv", index=False)
EOF
ls "$BANK" "$RETAILER"                # new.csv  test.csv  train.csv, in each

# docs/tutorials/two-organisations.md, line 65
cd "$BANK"
dpadmm provision --parties coordinator,party1 --out pki             # the CA and the bank's two identities
cd "$RETAILER"
dpadmm party request --name party2 --out tls                         # the retailer's key and request
cd "$BANK"
dpadmm provision --csr "$RETAILER/tls/party2.csr" --out pki          # the bank's CA signs the request
cp pki/party2/cert.pem pki/ca.pem "$RETAILER/tls/"                   # the certificates go back; the key never moved

# docs/tutorials/two-organisations.md, line 89
cd "$RETAILER"
dpadmm party serve --name party2 --listen 127.0.0.1:$RETAILER_PORT --tls tls --allow coordinator \
    --protocol vertical-experts --protocol psi-align --relation record --normalize-rows \
    --data train=train.csv --data test=test.csv \
    --max-epsilon 8 --delta 1e-5 --ledger "sqlite:///$RETAILER/ledger-store/ledger.db" --ledger-key "$RETAILER/keys/ledger.key" --out state > serve-experts.log 2>&1 &
RETAILER_SERVER=$!                    # its process id, to stop it later
until grep -q "serving" serve-experts.log; do sleep 1; done                  # wait until it listens
cat serve-experts.log                 # party party2 serving vertical-experts+psi-align on 127.0.0.1:7102 …

# docs/tutorials/two-organisations.md, line 110
cd "$BANK"
dpadmm vertical experts --backend grpc --psi --tls pki/coordinator \
    --peer party2=127.0.0.1:$RETAILER_PORT --party train.csv --test-party test.csv --normalize-rows \
    --epsilon 1 --label-epsilon 4 --min-effective-rows 4000 --quiet --out run-experts | tee experts.txt

# docs/tutorials/two-organisations.md, line 147
kill $RETAILER_SERVER; wait $RETAILER_SERVER || true

# docs/tutorials/two-organisations.md, line 157
cd "$RETAILER"
dpadmm party serve --name party2 --listen 127.0.0.1:$RETAILER_PORT --tls tls --allow coordinator \
    --protocol vertical-experts --protocol psi-align --relation record --normalize-rows \
    --data train=train.csv --data new=new.csv --data model=state/model.npz \
    --max-epsilon 8 --delta 1e-5 --ledger "sqlite:///$RETAILER/ledger-store/ledger.db" --ledger-key "$RETAILER/keys/ledger.key" --out state > serve-scoring.log 2>&1 &
RETAILER_SERVER=$!
until grep -q "serving" serve-scoring.log; do sleep 1; done
cd "$BANK"
dpadmm score --psi --tls pki/coordinator --peer party2=127.0.0.1:$RETAILER_PORT --party new.csv \
    --model run-experts --out scores | tee scores.txt
kill $RETAILER_SERVER; wait $RETAILER_SERVER || true

# docs/tutorials/two-organisations.md, line 187
cd "$RETAILER"
dpadmm party serve --name party2 --listen 127.0.0.1:$RETAILER_PORT --tls tls --allow coordinator \
    --protocol vertical-experts --protocol psi-align --relation record --normalize-rows \
    --data train=train.csv --data test=test.csv \
    --max-epsilon 8 --delta 1e-5 --ledger "sqlite:///$RETAILER/ledger-store/ledger.db" --ledger-key "$RETAILER/keys/ledger.key" --out state > serve-refuse.log 2>&1 &
RETAILER_SERVER=$!
until grep -q "serving" serve-refuse.log; do sleep 1; done
cd "$BANK"
dpadmm vertical experts --backend grpc --psi --tls pki/coordinator \
    --peer party2=127.0.0.1:$RETAILER_PORT --party train.csv --test-party test.csv --normalize-rows \
    --epsilon 8 --label-epsilon 4 --min-effective-rows 4000 --quiet --out run-too-much 2> refused.txt \
    || cat refused.txt
kill $RETAILER_SERVER; wait $RETAILER_SERVER || true
dpadmm party ledger --ledger "sqlite:///$RETAILER/ledger-store/ledger.db" --ledger-key "$RETAILER/keys/ledger.key" --data "$RETAILER/train.csv"   # what the retailer has spent

# docs/tutorials/two-organisations.md, line 217
cd "$BANK"
dpadmm party serve --name party1 --listen 127.0.0.1:$BANK_PORT --tls pki/party1 \
    --protocol vertical-sharing --protocol psi-align --requests score,rank,refit --relation record \
    --normalize-rows --data train=train.csv --data test=test.csv \
    --max-epsilon 8 --delta 1e-5 --ledger "sqlite:///$BANK/ledger-store/ledger.db" --ledger-key "$BANK/keys/ledger.key" --out state > serve-sharing.log 2>&1 &
BANK_SERVER=$!
cd "$RETAILER"
dpadmm party serve --name party2 --listen 127.0.0.1:$RETAILER_PORT --tls tls --allow coordinator \
    --protocol vertical-sharing --protocol psi-align --relation record --normalize-rows \
    --data train=train.csv --data test=test.csv \
    --max-epsilon 8 --delta 1e-5 --ledger "sqlite:///$RETAILER/ledger-store/ledger.db" --ledger-key "$RETAILER/keys/ledger.key" --out sharing > serve-sharing.log 2>&1 &
RETAILER_SERVER=$!
until grep -q "serving" "$BANK/serve-sharing.log" && grep -q "serving" serve-sharing.log; do sleep 1; done
cd "$BANK"
dpadmm vertical admm --backend grpc --psi --tls pki/coordinator --peer party1=127.0.0.1:$BANK_PORT \
    --peer party2=127.0.0.1:$RETAILER_PORT --party train.csv --test-party test.csv --relation record \
    --normalize-rows --epsilon 2 --delta 1e-5 --iterations 400 --checkpoint-every 5 --timeout 30 --quiet \
    --out run-sharing 2> killed.txt &
RUN=$!
# the retailer's machine goes down after its tenth round (its audit log has a line per round it served)
until [ "$(grep -c '"method": "Step"' "$RETAILER/sharing/audit.jsonl" 2>/dev/null)" -ge 10 ]; do sleep 0.1; done
kill -9 $RETAILER_SERVER
wait $RUN || cat killed.txt           # error: party 'party2' failed in round …

# docs/tutorials/two-organisations.md, line 252
cd "$RETAILER"
dpadmm party serve --name party2 --listen 127.0.0.1:$RETAILER_PORT --tls tls --allow coordinator \
    --protocol vertical-sharing --protocol psi-align --relation record --normalize-rows \
    --data train=train.csv --data test=test.csv \
    --max-epsilon 8 --delta 1e-5 --ledger "sqlite:///$RETAILER/ledger-store/ledger.db" --ledger-key "$RETAILER/keys/ledger.key" --out sharing > serve-sharing-2.log 2>&1 &
RETAILER_SERVER=$!
until grep -q "serving" serve-sharing-2.log; do sleep 1; done
cd "$BANK"
dpadmm vertical admm --backend grpc --psi --tls pki/coordinator --peer party1=127.0.0.1:$BANK_PORT \
    --peer party2=127.0.0.1:$RETAILER_PORT --party train.csv --test-party test.csv --relation record \
    --normalize-rows --epsilon 2 --delta 1e-5 --iterations 400 --checkpoint-every 5 --timeout 30 --quiet \
    --resume run-sharing --out run-sharing | tee resumed.txt
kill $RETAILER_SERVER $BANK_SERVER; wait $RETAILER_SERVER $BANK_SERVER || true
