"""A party's cap on one received message (issue 36, item 6): ``party serve --max-message-mb`` (default 64 MiB). A real
``dpadmm party serve`` process is sent a message 8× over its cap on each transport — gRPC (refused from the message's
length prefix: RESOURCE_EXHAUSTED) and the round channel (refused from the frame header, audited, connection closed)
— and its resident memory (VmRSS, /proc) must not grow by more than the cap."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")

from conftest import run_cli  # noqa: E402
from dpadmm.backends.grpc_wire import SERVICE  # noqa: E402

CAP_MB = 8


def _rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def party(tmp_path):
    if not Path("/proc/self/status").exists():
        pytest.skip("reads VmRSS from /proc")
    log = tmp_path / "party.log"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "dpadmm", "party", "serve", "--name", "p1", "--protocol",
                                 "selftest", "--listen", "127.0.0.1:0", "--insecure", "--out", str(tmp_path / "p1"),
                                 "--no-budget", "--max-message-mb", str(CAP_MB)],
                                stdout=fh, stderr=subprocess.STDOUT, env=env)
    try:
        text = ""
        for _ in range(300):
            text = log.read_text()
            if "round channel" in text:
                break
            time.sleep(0.1)
        port = int(text.split(" on 127.0.0.1:")[1].split()[0])
        rounds = int(text.split("round channel")[1].split("127.0.0.1:")[1].split()[0])
        yield proc, port, rounds, tmp_path / "p1", log
    finally:
        proc.terminate()
        proc.wait(10)


def _settle(pid: int) -> int:
    time.sleep(0.5)
    return _rss(pid)


def test_grpc_refuses_a_message_over_the_cap_without_reading_it(party):
    proc, port, _, _, _ = party
    big = os.urandom(8 * CAP_MB << 20)
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", -1)]) as ch:
        hello = ch.unary_unary(f"/{SERVICE}/Hello")
        try:
            hello(b"\x00", timeout=10)  # connects (the party refuses the undecodable request)
        except grpc.RpcError:
            pass
        before = _settle(proc.pid)
        with pytest.raises(grpc.RpcError) as exc:
            hello(big, timeout=30)
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc.value
        assert "larger than max" in (exc.value.details() or ""), exc.value.details()
        grown = _settle(proc.pid) - before
    assert grown < CAP_MB << 20, f"the party's RSS grew by {grown / 2**20:.1f} MiB (cap {CAP_MB} MiB)"
    assert proc.poll() is None  # still serving


def test_the_round_channel_refuses_a_frame_over_the_cap_from_its_header(party):
    proc, _, rounds, out, _ = party
    before = _settle(proc.pid)
    n = 8 * CAP_MB << 20
    with socket.create_connection(("127.0.0.1", rounds), timeout=10) as s:
        s.sendall(struct.pack(">I", n))
        sent = 0
        chunk = os.urandom(1 << 20)
        try:
            while sent < n:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the party closed the connection: refused
    grown = _settle(proc.pid) - before
    assert grown < CAP_MB << 20, f"the party's RSS grew by {grown / 2**20:.1f} MiB (cap {CAP_MB} MiB)"
    time.sleep(0.5)
    recs = [json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines()]
    refusals = [r for r in recs if r["status"] == "refused" and "frame length" in r.get("detail", "")]
    assert refusals and f"frame length {n} outside 1..{CAP_MB << 20} bytes" in refusals[-1]["detail"], refusals


@pytest.mark.parametrize("value", ["0", "-1", "5000", "nan"])
def test_a_bad_cap_is_one_line_and_exit_2(tmp_path, capsys, value):
    code, _, err = run_cli(["party", "serve", "--name", "p1", "--protocol", "selftest", "--insecure", "--no-budget",
                            "--out", tmp_path / "p1", "--max-message-mb", value], capsys)
    assert code == 2 and "--max-message-mb must be in (0, 1024]" in err, err
    assert not (tmp_path / "p1").exists()  # nothing written
