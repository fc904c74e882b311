"""The walk-search kernels compiled ahead of time (core._search_aot): same walks as the JIT kernels, checked
arguments, refused when stale or half written, no numba in a process that plans with them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

from core import _search_aot, search
from core.synthetic import random_geometric_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# building needs what the robot has as installed: a C compiler and the Python headers
pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None or not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")),
    reason="no C compiler or Python headers on this machine: the compiled kernels cannot be built")


@pytest.fixture(scope="module")
def compiled_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("kernels")
    _search_aot.build(d)
    return d


@pytest.fixture()
def compiled(compiled_dir, monkeypatch):
    """core.search planning with the compiled kernels (a fresh backend, restored afterwards)."""
    monkeypatch.setattr(search, "kern", search._Kernels())
    info = search.use_compiled_kernels(compiled_dir)
    assert info == {"backend": "compiled", "detail": f"compiled kernels in {compiled_dir}"}
    return search.kern


def _jit_plans(fn):
    from core import _search_kernels

    jit = search._Kernels()
    jit.use(_search_kernels, "jit", "test")
    old, search.kern = search.kern, jit
    try:
        return fn()
    finally:
        search.kern = old


def test_build_writes_the_module_and_a_stamp_naming_every_kernel_signature(compiled_dir):
    stamp = _search_aot.read_stamp(compiled_dir)
    assert stamp["file"] == _search_aot.module_path(compiled_dir).name
    assert {e["kernel"] for e in stamp["exports"].values()} == set(_search_aot.KERNELS)
    # csr_check, walk_length_kernel and reconstruct_walk have two signatures each
    assert len(stamp["exports"]) == len(_search_aot.KERNELS) + 3
    assert stamp["exports"]["csr_check__1"]["args"][2] == {"array": "float64", "ndim": 1, "layout": "C"}
    assert stamp["exports"]["lmnav_search__0"]["args"][3] == {"array": "float64", "ndim": 2, "layout": "A"}
    assert _search_aot.stamp_problem(compiled_dir) is None
    # the wrappers release the GIL during a call, as the JIT kernels' nogil=True
    assert b"PyEval_SaveThread" in _search_aot.module_path(compiled_dir).read_bytes()
    assert not list(compiled_dir.glob(".build-*"))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("alpha", [0.005, 0.0])  # 0: the level-by-level DP (lmnav_dp)
def test_compiled_kernels_plan_the_same_walks_as_the_jit_kernels(compiled, seed, alpha):
    n = 800
    indptr, indices, weights, _ = random_geometric_graph(n, degree=6, seed=seed)
    rng = np.random.default_rng(seed)
    logp = np.log(rng.dirichlet(np.ones(n), size=4).T)
    start = int(rng.integers(n))
    got = search.plan_walk(indptr, indices, weights, logp, start, alpha=alpha)
    want = _jit_plans(lambda: search.plan_walk(indptr, indices, weights, logp, start, alpha=alpha))
    assert got.ok and want.ok
    np.testing.assert_array_equal(got.nodes, want.nodes)
    np.testing.assert_array_equal(got.landmark_positions, want.landmark_positions)
    assert got.objective == want.objective and got.length == want.length
    ml = search.plan_max_likelihood(indptr, indices, weights, logp, start, alpha=alpha)
    ml_want = _jit_plans(lambda: search.plan_max_likelihood(indptr, indices, weights, logp, start, alpha=alpha))
    np.testing.assert_array_equal(ml.nodes, ml_want.nodes)


def test_compiled_kernels_report_unreachable_landmarks_and_bad_graphs_as_the_jit_ones(compiled):
    indptr, indices, weights = np.array([0, 1, 1, 1]), np.array([1]), np.array([1.0], np.float32)
    logp = np.array([[-np.inf], [-np.inf], [0.0]])  # only node 2, which no edge reaches
    assert search.plan_walk(indptr, indices, weights, logp, 0).status is search.PlanStatus.UNREACHABLE
    with pytest.raises(ValueError, match="negative edge weight"):
        search.plan_walk(indptr, indices, np.array([-1.0]), logp, 0)
    with pytest.raises(ValueError, match="out of range"):
        search.plan_walk(indptr, np.array([5]), weights, logp, 0)
    assert search.walk_length(np.array([0, 1]), indptr, indices, weights) == 1.0
    assert search.kernels_info()["backend"] == "compiled"


def test_arguments_no_signature_takes_raise_type_error_not_a_crash(compiled):
    ip, ix = np.array([0, 1, 1]), np.array([1])
    with pytest.raises(TypeError, match=r"csr_check: no compiled signature takes \(int64\[3\] \(C\), int32\[1\]"):
        compiled.csr_check(ip, ix.astype(np.int32), np.array([1.0]))
    ro = np.array([1.0], np.float32)
    ro.setflags(write=False)
    with pytest.raises(TypeError, match="read-only"):
        compiled.csr_check(ip, ix, ro)
    with pytest.raises(TypeError, match="reconstruct_walk"):
        compiled.reconstruct_walk(np.zeros((2, 3), np.int64), 1.5, 0)  # a float where int64 goes
    with pytest.raises(TypeError, match="non-contiguous"):
        compiled.walk_length_kernel(np.array([0, 1, 0, 1])[::2], ip, ix, np.array([1.0], np.float32))
    assert compiled.csr_check(ip, ix, np.array([2.0])) == (0, 2.0, 2.0, 2.0)  # still usable afterwards


def _copy_build(compiled_dir, tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    for name in (_search_aot.STAMP_FILE, _search_aot.module_path(compiled_dir).name):
        (d / name).write_bytes((compiled_dir / name).read_bytes())
    return d


@pytest.mark.parametrize("key, value, reason", [
    ("numba", "0.1.0", "stale: numba version 0.1.0 at the build"),
    ("source_sha256", "0" * 64, "stale: the kernels' source (core/_search_kernels.py) changed since the build"),
    ("cpu", "0123456789abcdef", "stale: CPU model or features 0123456789abcdef at the build"),
    ("python", "cpython-39", "stale: Python version cpython-39 at the build"),
    ("format", 99, "not a stamp of format 1"),
])
def test_a_stale_build_is_refused_with_the_reason_and_planning_uses_the_jit(compiled_dir, tmp_path, monkeypatch,
                                                                           key, value, reason):
    d = _copy_build(compiled_dir, tmp_path)
    stamp = json.loads((d / _search_aot.STAMP_FILE).read_text())
    stamp[key] = value
    (d / _search_aot.STAMP_FILE).write_text(json.dumps(stamp))
    assert reason in _search_aot.stamp_problem(d)
    with pytest.raises(ValueError, match="stale|format"):
        _search_aot.load(d)
    monkeypatch.setattr(search, "kern", search._Kernels())
    info = search.use_compiled_kernels(d)
    assert info["backend"] == "jit" and reason in info["detail"]
    r = search.plan_walk(np.array([0, 1, 1]), np.array([1]), np.array([1.0], np.float32), np.zeros((2, 1)), 0)
    assert r.ok and search.kernels_info()["backend"] == "jit" and reason in search.kernels_info()["detail"]


def _edit_exports(d, edit, *, rehash=False):
    """Change the stamp's export table in place (``rehash``: as a build would have, with a matching hash)."""
    path = d / _search_aot.STAMP_FILE
    stamp = json.loads(path.read_text())
    edit(stamp)
    if rehash:
        stamp["content_sha256"] = _search_aot._content_sha256(_search_aot.module_path(d).read_bytes(),
                                                              stamp["exports"])
    path.write_text(json.dumps(stamp))


def _swap_csr_check_signatures(stamp):
    ex = stamp["exports"]
    ex["csr_check__0"]["args"], ex["csr_check__1"]["args"] = ex["csr_check__1"]["args"], ex["csr_check__0"]["args"]


@pytest.mark.parametrize("edit, reason", [
    (_swap_csr_check_signatures, "does not match its stamp"),  # would call a float32 kernel on float64 data
    (lambda st: st.pop("exports"), "no export table"),
    (lambda st: st.update(exports=[]), "no export table"),
    (lambda st: st["exports"]["csr_check__0"].pop("kernel"), "export 'csr_check__0' is not a known kernel's"),
    (lambda st: st["exports"]["csr_check__0"].update(args="x"), "export 'csr_check__0' is not a known kernel's"),
    (lambda st: st.update(file=5), "names the module 5"),
    (lambda st: st.update(file="../elsewhere.so"), "names the module '../elsewhere.so'"),
    (lambda st: st.update(builder_sha256="0" * 64), "stale: the builder (core/_search_aot.py) changed"),
])
def test_an_edited_or_damaged_export_table_is_refused_never_trusted(compiled_dir, tmp_path, monkeypatch, edit,
                                                                     reason):
    d = _copy_build(compiled_dir, tmp_path)
    _edit_exports(d, edit)
    assert reason in _search_aot.stamp_problem(d)
    monkeypatch.setattr(search, "kern", search._Kernels())
    info = search.use_compiled_kernels(d)  # falls back, never raises
    assert info["backend"] == "jit" and reason in info["detail"]
    out = _cli("kernels", "info", "--dir", str(d))
    assert out.returncode == 1 and reason in out.stdout and "Traceback" not in out.stderr


def test_a_build_missing_a_kernel_the_product_calls_is_stale(compiled_dir, tmp_path):
    d = _copy_build(compiled_dir, tmp_path)  # as if KERNELS grew since the build
    _edit_exports(d, lambda st: [st["exports"].pop(k) for k in list(st["exports"]) if k.startswith("walk_length")],
                  rehash=True)
    assert _search_aot.stamp_problem(d).endswith("built without walk_length_kernel")


def test_concurrent_builds_take_turns_and_only_one_compiles(tmp_path):
    d = tmp_path / "k"
    procs = [subprocess.Popen([sys.executable, "-m", "robot_app", "kernels", "build", "--dir", str(d), "--if-stale",
                               "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    built = sorted(json.loads(o.strip().splitlines()[-1])["built"] for o, _ in outs)
    assert built == [False, True] and _search_aot.stamp_problem(d) is None
    assert not list(d.glob(".build-*"))


def test_walk_length_checks_nodes_and_copies_read_only_input(compiled):
    ip, ix, w = np.array([0, 1, 2]), np.array([1, 0]), np.ones(2, np.float32)
    with pytest.raises(ValueError, match=r"walk: node 10000000000000 is outside \[0, 2\)"):
        search.walk_length(np.array([10**13, 0]), ip, ix, w)
    with pytest.raises(ValueError, match="not a CSR graph"):
        search.walk_length(np.array([0, 1]), ip, ix, np.ones(3))
    g = search.check_graph(ip, ix, w)  # read-only views, read as they are
    assert search.walk_length(np.array([0, 1, 0]), *g) == 2.0
    logp = np.broadcast_to(np.array([[-9.0], [0.0]]), (2, 1))  # read-only, as a memory map would be
    r = search.plan_walk(*g, logp, 0)
    assert r.ok and r.nodes.tolist() == [0, 1]


def test_a_half_written_or_missing_module_and_a_garbled_stamp_are_refused(compiled_dir, tmp_path):
    d = _copy_build(compiled_dir, tmp_path)
    so = _search_aot.module_path(d)
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])  # a power cut during a copy
    assert "does not match its stamp" in _search_aot.stamp_problem(d)
    so.unlink()
    assert _search_aot.stamp_problem(d).endswith(": missing")
    (d / _search_aot.STAMP_FILE).write_text("{not json")
    assert "unreadable" in _search_aot.stamp_problem(d)
    with pytest.raises(FileNotFoundError, match="no compiled kernels in"):
        _search_aot.load(tmp_path / "nothing-here")


def test_a_process_planning_with_the_compiled_kernels_never_loads_numba(compiled_dir):
    code = ("import sys\n"
            "import robot_app.service.app\n"  # the whole service's imports
            "assert 'numba' not in sys.modules, 'the service imports numba'\n"
            "import numpy as np\n"
            "from core import search\n"
            f"print(search.use_compiled_kernels({str(compiled_dir)!r})['backend'])\n"
            "search.warm_up()\n"
            "r = search.plan_walk(np.array([0, 1, 2, 2]), np.array([1, 2]), np.array([1.0, 2.0], np.float32),"
            " np.array([[-9.0, -9.0], [0.0, -9.0], [-9.0, 0.0]]), 0)\n"
            "print(r.nodes.tolist(), 'numba' in sys.modules, 'llvmlite' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["compiled", "[0, 1, 2] False False"]


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "robot_app", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


def test_cli_info_and_build_if_stale(compiled_dir, tmp_path):
    out = _cli("kernels", "info", "--dir", str(compiled_dir))
    assert out.returncode == 0 and "current" in out.stdout and "the service plans with them" in out.stdout
    out = _cli("kernels", "build", "--dir", str(compiled_dir), "--if-stale", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == {"built": False, "dir": str(compiled_dir),
                                                                "reason": "current"}
    missing = tmp_path / "none"
    out = _cli("kernels", "info", "--dir", str(missing), "--json")
    assert out.returncode == 1 and json.loads(out.stdout)["problem"] == f"no compiled kernels in {missing}"


def test_cli_build_without_a_c_compiler_fails_clearly_and_leaves_the_old_build(compiled_dir, tmp_path):
    d = _copy_build(compiled_dir, tmp_path)
    stamp = (d / _search_aot.STAMP_FILE).read_bytes()
    env = dict(os.environ, CC="/nonexistent/cc", LDSHARED="/nonexistent/cc -shared")
    out = _cli("kernels", "build", "--dir", str(d), env=env)
    assert out.returncode == 1
    assert "no C compiler found" in out.stderr and "gcc" in out.stderr and "Traceback" not in out.stderr
    assert "numba's JIT kernels meanwhile" in out.stderr
    assert (d / _search_aot.STAMP_FILE).read_bytes() == stamp and _search_aot.stamp_problem(d) is None
    assert not list(d.glob(".build-*"))


def test_if_stale_sweeps_what_a_killed_build_left_unless_a_build_holds_the_lock(compiled_dir, tmp_path):
    import fcntl

    d = _copy_build(compiled_dir, tmp_path)
    (d / ".build-killed").mkdir()
    with open(d / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a running build holds it
        assert _search_aot.sweep_stale(d) == 0 and (d / ".build-killed").is_dir()
    out = _cli("kernels", "build", "--dir", str(d), "--if-stale")
    assert out.returncode == 0 and "current" in out.stdout and not (d / ".build-killed").exists()


def test_cli_refuses_an_empty_dir(tmp_path):
    for action in ("build", "info"):
        out = _cli("kernels", action, "--dir", "")
        assert out.returncode == 2 and "--dir: empty path" in out.stderr


def test_cli_build_into_a_folder_that_cannot_be_made_names_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = _cli("kernels", "build", "--dir", str(blocker / "kernels"))
    assert out.returncode == 1 and f"{blocker / 'kernels'}: cannot create the kernels folder" in out.stderr


def test_bench_service_memory_runs_the_idle_service_without_llvm(compiled_dir, tmp_path):
    """The whole service (sim devices in a child) with the compiled kernels: LLVM is never mapped into it."""
    cfg = tmp_path / "robot.toml"
    cfg.write_text(f"[paths]\nkernels_dir = {str(compiled_dir)!r}\n")
    out = _cli("--config", str(cfg), "bench", "service-memory", "--kernels", "compiled", "--idle-s", "1", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    run = res["runs"]["compiled"]
    assert list(res["runs"]) == ["compiled"] and "building" not in out.stderr  # the current build was used
    assert run["llvm_mapped"] is False and run["samples"] >= 2 and run["idle_rss_mib_median"] > 0
    assert sorted(run["warm_up_steps_s"]) == ["route planner (walk search kernels)", "task planner"]
    assert all(v is not None for v in run["warm_up_steps_s"].values())
    assert run["kernels_log"].startswith("compiled kernels in")


def test_a_new_build_that_fails_its_self_test_in_a_child_is_never_installed(compiled_dir, tmp_path):
    from core._search_aot_check import self_test

    self_test(compiled_dir)  # the real build passes: compiled walks == JIT walks
    d = _copy_build(compiled_dir, tmp_path)
    _edit_exports(d, _swap_csr_check_signatures)
    with pytest.raises(_search_aot.KernelBuildError, match="failed their self test .*does not match its stamp"):
        _search_aot._check_in_child(d)
