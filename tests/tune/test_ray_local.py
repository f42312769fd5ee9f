"""nf.RayRunner("local") in a fresh process: it starts a private Ray
instance bound to 127.0.0.1, tunes on it, holds no socket off loopback,
and shuts the instance down."""
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'neoflow[ray]')")
pytest.importorskip("psutil", reason="psutil is not installed (the sockets check)")

SCRIPT = Path(__file__).with_name("ray_local_check.py")


def loopback(ip):
    if not ip:
        return True
    ip = ipaddress.ip_address(ip)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


@pytest.mark.slow
def test_local_address_starts_a_private_loopback_instance(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "t.sqlite")],
                          capture_output=True, text=True, timeout=240, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report["measured"]) == 1 and sum(report["measured"].values()) >= 4
    assert report["sockets"], "Ray held no inet socket at all?"
    off = [s for s in report["sockets"] if not (loopback(s[1]) and loopback(s[2]))]
    assert not off, off
