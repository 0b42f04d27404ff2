"""Ray on loopback by default (issue 35, item 5): a local Ray run's processes listen on 127.0.0.1 only; joining a
cluster names how it is secured.

The port check runs the backend in a fresh interpreter, in the ordinary network namespace (the Ray suite's
loopback-only namespace would make it trivially true), without the test session's Ray variables, and lists the
listening TCP sockets (/proc/net/tcp, tcp6) that belong to it or to any process it started (GCS, raylet, workers,
agents: /proc/<pid>/fd)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpadmm.backends.ray import security_note

SRC = Path(__file__).resolve().parents[2] / "src"

PROBE = r'''
import json, os, socket
from dpadmm.backends import get_backend


def listening():
    out = {}
    for path, fam in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in open(path).read().splitlines()[1:]:
            f = line.split()
            if f[3] != "0A":  # LISTEN
                continue
            raw, port = bytes.fromhex(f[1].split(":")[0]), int(f[1].split(":")[1], 16)
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            out[f[9]] = (socket.inet_ntop(fam, words), port)
    return out


def descendants(root):
    children = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        out.add(p)
        todo += children.get(p, [])
    return out


def sockets(pid):
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


from dpadmm import engine
from dpadmm.backends.selftest import toy_specs
be = get_backend("ray", timeout=120.0)
try:
    hub, specs = toy_specs(2, 3, noise=1.0)
    engine.run(hub=hub, parties=specs, backend=be, rounds=2, noise_seed=0)
    table = listening()
    rows = [(pid, open(f"/proc/{pid}/comm").read().strip(), *table[i])
            for pid in sorted(descendants(os.getpid())) for i in sockets(pid) if i in table]
    import ray
    print(json.dumps({"node": ray.util.get_node_ip_address(), "listening": rows}))
finally:
    be.close()
'''


@pytest.mark.slow
@pytest.mark.ray
def test_a_local_ray_run_listens_on_loopback_only(tmp_path):
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=str(SRC), RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = report["listening"]
    names = {r[1] for r in rows}
    assert report["node"] == "127.0.0.1"
    assert "gcs_server" in names and "raylet" in names, rows  # the check saw Ray's own servers
    outside = [r for r in rows if r[2] not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
    assert not outside, outside


@pytest.mark.parametrize("env, says", [
    ({}, ["NOT encrypted", "RAY_USE_TLS is not set", "token authentication"]),
    ({"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": "/c", "RAY_TLS_SERVER_KEY": "/k", "RAY_TLS_CA_CERT": "/ca",
      "RAY_AUTH_MODE": "token"}, ["mutual TLS", "RAY_TLS_CA_CERT=/ca", "RAY_AUTH_MODE=token"]),
    ({"RAY_AUTH_MODE": "disabled"}, ["NO authentication"]),
])
def test_joining_a_cluster_names_how_it_is_secured(env, says):
    line = security_note("10.0.0.5:6379", env)
    assert line.startswith("Ray cluster at 10.0.0.5:6379") and all(s in line for s in says), line


def test_the_cli_prints_the_security_of_a_cluster_it_joins(tmp_path, capsys, monkeypatch):
    """The line comes before any connection (here none is made: joining is stubbed to fail at once)."""
    pytest.importorskip("ray")
    from conftest import run_cli

    from dpadmm.backends import ray as ray_backend
    from dpadmm.exceptions import PartyFailureError

    def no_cluster(self):
        raise PartyFailureError("test: no cluster joined")

    monkeypatch.setattr(ray_backend.RayBackend, "_ensure_ray", no_cluster)
    code, _, err = run_cli(["vertical", "admm", "--backend", "ray", "--ray-address", "10.0.0.5:6379", "--data", "a9a",
                            "--iterations", "1", "--out", tmp_path / "o", "--quiet"], capsys)
    assert code == 2 and "test: no cluster joined" in err, err
    assert "Ray cluster at 10.0.0.5:6379: transport" in err and "RAY_USE_TLS" in err, err
