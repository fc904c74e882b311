"""``robot-app bench estop`` (short run): every STOP press, from the touchscreen and as the MCU's hardware
e-stop Status frame, is followed by a zero Drive frame at the simulated MCU. No timing bounds here: the
figures are the benchmark's (docs/benchmarks.md)."""

from __future__ import annotations

import json
import math

from robot_app.cli import main


def test_bench_estop_short_run(capsys):
    assert main(["bench", "estop", "--trials", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["goal_s"] == 0.1 and res["cpu_hogs"] == 0 and set(res["paths"]) == {"touchscreen", "hardware"}
    for path, r in res["paths"].items():
        assert r["trials"] == 2 and len(r["wire_s"]) == 2, path
        assert all(math.isfinite(x) and x > 0 for x in r["wire_s"] + r["written_s"]), (path, r)
        assert r["min_s"] <= r["p50_s"] <= r["p95_s"] <= r["max_s"]
        assert all(w <= x for w, x in zip(r["written_s"], r["wire_s"]))  # written before the MCU read it


def test_bench_estop_usage(capsys):
    assert main(["bench", "estop", "--trials", "0"]) == 2
    assert main(["bench", "estop", "--load", "65"]) == 2
    assert "--trials" in capsys.readouterr().err
