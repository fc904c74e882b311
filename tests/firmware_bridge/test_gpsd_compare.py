"""Agreement of the NMEA decoder with gpsd's expected output on excerpts of gpsd's own test logs
(tests/data/nmea_gpsd: six receivers; the full logs and Debian's gpsd logs are measured in
docs/devices.md with ``robot-app bench gpsd``)."""

from __future__ import annotations

import json

from firmware_bridge.gpsd_compare import compare_dir, compare_log, gpsd_fix_epochs, is_nmea_log
from robot_app.cli import main


def test_the_copied_gpsd_logs_are_nmea_and_have_gpsd_fix_epochs(dev_data):
    logs = sorted((dev_data / "nmea_gpsd").glob("*.log"))
    assert len(logs) == 6 and all(is_nmea_log(p) for p in logs)
    assert all(gpsd_fix_epochs(p.with_name(p.name + ".chk")) for p in logs)


def test_no_fix_that_gpsd_does_not_report_and_none_of_gpsd_missed_on_its_logs(dev_data):
    results = {r.name: r for r in compare_dir(dev_data / "nmea_gpsd", log_interval_s=1e9)}
    assert len(results) == 6
    for name, r in results.items():
        assert r.extra == 0, (name, r.extra_times)
        if name != "cat-ms352.log":  # its every sentence is too long for NMEA 0183 (below)
            assert r.missed == 0 and r.matched >= 2, (name, r.missed_reasons, r.missed_times)
            assert r.max_distance_m is not None and r.max_distance_m < 0.01
    assert results["ublox-f9p-hpnmea.log"].bad == {"too_long": 2}  # its GGA; the RMC gives the fix
    cat = results["cat-ms352.log"]
    assert cat.ours == 0 and cat.bad == {"too_long": 12}
    cat = compare_log(dev_data / "nmea_gpsd" / "cat-ms352.log", max_sentence_chars=130)
    assert (cat.gpsd_epochs, cat.ours, cat.matched, cat.extra, cat.missed) == (6, 6, 6, 0, 0)


def test_bench_gpsd_command(dev_data, capsys, tmp_path):
    assert main(["bench", "gpsd", "--logs", str(dev_data / "nmea_gpsd"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["logs"]) == 6 and out["total"]["extra"] == 0
    assert out["total"]["gpsd_epochs"] == sum(r["gpsd_epochs"] for r in out["logs"])
    assert main(["bench", "gpsd", "--logs", str(dev_data / "nmea_gpsd"), "--max-sentence-chars", "130",
                 "--strict"]) == 0
    text = capsys.readouterr().out
    assert "furuno_gl_ga.log" in text and "total (6 logs)" in text
    assert main(["bench", "gpsd", "--logs", str(dev_data / "nmea_gpsd"), "--strict"]) == 1  # cat-ms352 at 82
    capsys.readouterr()
    assert main(["bench", "gpsd", "--logs", str(tmp_path)]) == 2
    assert main(["bench", "gpsd", "--logs", str(tmp_path / "missing")]) == 2
