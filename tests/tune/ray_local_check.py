"""Run as a script: tune a small matmul on nf.RayRunner("local") (a private
Ray instance on 127.0.0.1), then print one JSON line: the record's
hardware, the candidates each node measured, and every inet socket that
this process and its children (Ray's) hold. The test (test_ray_local.py)
checks it; docs/tuning.md runs it under strace."""
import json
import sys

import psutil

import neoflow as nf
from neoflow.tune import Database


def sockets():
    me = psutil.Process()
    out = []
    for p in [me] + me.children(recursive=True):
        try:
            for s in p.net_connections(kind="inet"):
                out.append([p.name(), s.laddr.ip if s.laddr else "",
                            s.raddr.ip if s.raddr else "", s.status])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def main(db_path):
    A = nf.placeholder((24, 16), name="A")
    B = nf.placeholder((16, 20), name="B")
    k = nf.reduce_axis(16, name="k")
    C = nf.compute((24, 20), lambda i, j: nf.sum(A[i, k] * B[k, j], axis=k), name="C")
    with nf.RayRunner("local") as runner, Database(db_path) as db:
        rec = nf.tune(C, [A, B], trials=4, database=db, runner=runner, progress=False,
                      timeout=5.0)
        seen = sockets()
        print(json.dumps({"hardware": rec.hardware, "measured": dict(runner.measured),
                          "sockets": seen}))


if __name__ == "__main__":
    main(sys.argv[1])
