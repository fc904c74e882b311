"""The walk-search kernels compiled ahead of time: the same numba code, loaded without numba or LLVM.

Importing numba and loading the JIT kernels of :mod:`core._search_kernels` from numba's on-disk cache adds
100-130 MB to a process (numba, llvmlite and LLVM's code and data) and 0.4-1 s to its start. The robot
only runs the kernels, so they can be compiled once on the robot itself (numba's ahead-of-time compiler,
``numba.pycc``: numba docs, "Compiling code ahead of time") into a plain CPython extension module of
under 1 MB that imports with numpy alone.

Built by :func:`build` (``robot-app kernels build``; needs numba, a C compiler and the Python headers,
which the robot has as installed), opened by :func:`load` (:func:`core.search.use_compiled_kernels`).
Rules that keep the compiled module equal to the JIT one and safe to call:

- **One source.** Every exported function is a JIT kernel's own Python code (``py_func``) with each of
  the kernel's explicit signatures, so the compiled module computes exactly what the JIT kernels do.
- **Built for this CPU** (``target_cpu = "host"``, as the JIT compiles); the stamp records the CPU, so a
  card moved to another machine falls back to the JIT instead of running instructions the CPU lacks.
- **GIL released** during a call, like the JIT kernels' ``nogil=True`` (the app searches in a worker
  thread while the drive loop runs). ``numba.pycc`` has no option for it; :func:`build` sets numba's
  ``release_gil`` compile flag for its own compilation only and checks the module calls
  ``PyEval_SaveThread``.
- **Arguments checked in Python.** The compiled wrappers do not check dtypes (a wrong one crashes the
  process), so :class:`CompiledKernels` checks every argument against the signatures recorded in the stamp
  and raises :class:`TypeError` instead.
- **Never stale, never half written.** The stamp (``search-kernels.json``) records the sha256 of
  ``core/_search_kernels.py`` and of this builder, the numba, numpy and Python versions, the CPU, and one
  sha256 over the module file and the stamp's signature table together; :func:`load` refuses the module
  when any differs or the table is malformed (the caller then uses the JIT kernels). Files are
  written to temporary names, fsynced and renamed, the module before the stamp: a power cut leaves the
  old pair or a stamp whose file sha256 no longer matches, both refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: name of the extension module (its ``PyInit_`` symbol) and of the stamp file
MODULE = "robot_lmnav_kernels"
STAMP_FILE = "search-kernels.json"
STAMP_FORMAT = 1
#: the JIT kernels of core._search_kernels the product calls (core.search); each signature becomes one export
KERNELS = ("lmnav_search", "lmnav_dp", "reconstruct_walk", "csr_check", "walk_length_kernel")
_SOURCE = Path(__file__).with_name("_search_kernels.py")


class KernelBuildError(RuntimeError):
    """The compiled kernels could not be built (no C compiler, numba missing, compile error)."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cpu_id() -> str:
    """sha256 (16 hex) of this CPU's model and feature flags (/proc/cpuinfo's first processor block)."""
    keys = ("model name", "flags", "cpu part", "cpu implementer", "features", "cpu architecture")
    lines = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                if lines:
                    break
                continue
            key = line.split(":", 1)[0].strip().lower()
            if key in keys:
                lines.append(line.strip())
    except OSError:
        pass
    return hashlib.sha256("\n".join([platform.machine(), *lines]).encode()).hexdigest()[:16]


def _versions() -> dict:
    try:
        numba_version = importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        numba_version = None
    return {"source_sha256": _sha256(_SOURCE), "builder_sha256": _sha256(Path(__file__)), "numba": numba_version,
            "numpy": np.__version__, "python": sys.implementation.cache_tag, "machine": platform.machine(),
            "cpu": _cpu_id()}


def module_path(directory: str | os.PathLike) -> Path:
    """Where :func:`build` writes the extension module in ``directory`` (this Python's suffix)."""
    return Path(directory) / (MODULE + importlib.machinery.EXTENSION_SUFFIXES[0])


def _content_sha256(module_bytes: bytes, exports) -> str:
    """sha256 of the module file and the export table together: the stamp's signatures are what the argument
    checks trust, so an edited or damaged table is refused like a damaged module."""
    h = hashlib.sha256(module_bytes)
    h.update(json.dumps(exports, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


def _spec_ok(spec) -> bool:
    if not isinstance(spec, dict):
        return False
    if set(spec) == {"scalar"}:
        return spec["scalar"] in ("bool", "int64", "int32", "float64", "float32")
    return (set(spec) == {"array", "ndim", "layout"} and spec["array"] in ("bool", "int64", "int32", "float64",
                                                                          "float32")
            and isinstance(spec["ndim"], int) and 1 <= spec["ndim"] <= 3 and spec["layout"] in ("C", "A"))


def _exports_problem(exports) -> str | None:
    """What is wrong with a stamp's export table (shape, kernels), or None."""
    if not isinstance(exports, dict) or not exports:
        return "no export table"
    for name, entry in exports.items():
        if not (isinstance(entry, dict) and entry.get("kernel") in KERNELS and isinstance(entry.get("args"), list)
                and all(_spec_ok(a) for a in entry["args"]) and name.startswith(f"{entry['kernel']}__")):
            return f"export {name!r} is not a known kernel's signature"
    missing = sorted(set(KERNELS) - {e["kernel"] for e in exports.values()})
    if missing:
        return f"built without {', '.join(missing)}"
    return None


def stamp_problem(directory: str | os.PathLike) -> str | None:
    """Why the compiled kernels in ``directory`` cannot be used here, or None when they can. Never raises."""
    d = Path(directory)
    try:
        stamp = json.loads((d / STAMP_FILE).read_text())
    except FileNotFoundError:
        return f"no compiled kernels in {d}"
    except (OSError, ValueError) as exc:
        return f"{d / STAMP_FILE}: unreadable ({exc})"
    if not isinstance(stamp, dict) or stamp.get("format") != STAMP_FORMAT:
        return f"{d / STAMP_FILE}: not a stamp of format {STAMP_FORMAT}"
    now = _versions()
    for key, what in (("source_sha256", "the kernels' source (core/_search_kernels.py) changed"),
                      ("builder_sha256", "the builder (core/_search_aot.py) changed"),
                      ("numba", "numba version"), ("numpy", "numpy version"), ("python", "Python version"),
                      ("machine", "CPU architecture"), ("cpu", "CPU model or features")):
        if stamp.get(key) != now[key]:
            if key.endswith("_sha256"):
                return f"stale: {what} since the build"
            return f"stale: {what} {stamp.get(key)} at the build, {now[key]} now"
    if stamp.get("file") != module_path(d).name:
        return f"{d / STAMP_FILE}: names the module {stamp.get('file')!r}, not {module_path(d).name}"
    why = _exports_problem(stamp.get("exports"))
    if why is not None:
        return f"{d / STAMP_FILE}: {why}"
    path = module_path(d)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return f"{path}: missing"
    except OSError as exc:
        return f"{path}: unreadable ({exc.strerror or exc})"
    if _content_sha256(data, stamp["exports"]) != stamp.get("content_sha256"):
        return f"{path}: does not match its stamp (changed or half written)"
    return None


def read_stamp(directory: str | os.PathLike) -> dict:
    """The stamp of the compiled kernels in ``directory``; raises OSError / ValueError when unreadable."""
    return json.loads((Path(directory) / STAMP_FILE).read_text())


# -- argument checks ---------------------------------------------------------------------------------------

def _type_spec(t) -> dict:
    """A numba type as JSON: arrays ``{"array", "ndim", "layout"}``, scalars ``{"scalar"}``."""
    from numba.core import types

    if isinstance(t, types.Array):
        return {"array": str(np.dtype(t.dtype.name)), "ndim": t.ndim, "layout": t.layout}
    name = "bool" if isinstance(t, types.Boolean) else str(np.dtype(t.name))
    return {"scalar": name}


def _fmt(spec: dict) -> str:
    if "array" in spec:
        dims = ", ".join([":"] * spec["ndim"])
        if spec["layout"] == "C":
            dims = dims[:-1] + "::1"
        return f"{spec['array']}[{dims}]"
    return spec["scalar"]


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        order = "C" if x.flags.c_contiguous else "non-contiguous"
        return f"{x.dtype}{list(x.shape)} ({order}{'' if x.flags.writeable else ', read-only'})"
    return type(x).__name__


def _matches(spec: dict, x) -> bool:
    if "array" in spec:
        return (type(x) is np.ndarray and x.dtype == np.dtype(spec["array"]) and x.ndim == spec["ndim"]
                and (spec["layout"] != "C" or x.flags.c_contiguous) and x.flags.writeable)
    kind = spec["scalar"]
    if kind == "bool":
        return isinstance(x, (bool, np.bool_))
    if isinstance(x, (bool, np.bool_)):
        return False
    if kind.startswith("int"):
        return isinstance(x, (int, np.integer))
    return isinstance(x, (int, float, np.integer, np.floating))


class CompiledKernels:
    """The compiled module behind the JIT kernels' names, with every argument checked first.

    ``kernels.lmnav_search(...)`` etc. take the arguments of the :mod:`core._search_kernels` kernel of the
    same name; a kernel with several signatures dispatches on the arguments' dtypes. Arguments no signature
    accepts raise :class:`TypeError` naming the kernel, the signatures and what was passed.
    """

    def __init__(self, module, stamp: dict, directory: Path):
        self.directory = directory
        self.stamp = stamp
        table: dict[str, list] = {}
        for export, entry in sorted(stamp["exports"].items()):
            table.setdefault(entry["kernel"], []).append((entry["args"], getattr(module, export)))
        missing = [k for k in KERNELS if k not in table]
        if missing:
            raise ValueError(f"{directory / STAMP_FILE}: no compiled {', '.join(missing)}")
        for name, candidates in table.items():
            setattr(self, name, self._dispatcher(name, candidates))

    @staticmethod
    def _dispatcher(name: str, candidates: list):
        def call(*args):
            for specs, fn in candidates:
                if len(args) == len(specs) and all(_matches(s, a) for s, a in zip(specs, args)):
                    return fn(*args)
            sigs = "; ".join("(" + ", ".join(_fmt(s) for s in specs) + ")" for specs, _ in candidates)
            got = ", ".join(_describe(a) for a in args)
            raise TypeError(f"{name}: no compiled signature takes ({got}); compiled: {sigs} "
                            "(arrays writeable, [::1] C-contiguous)")

        call.__name__ = name
        return call


def load(directory: str | os.PathLike) -> CompiledKernels:
    """Open the compiled kernels in ``directory``.

    Raises
    ------
    FileNotFoundError, ValueError
        no usable module there: missing, stale (:func:`stamp_problem` says why) or not importable.
    """
    d = Path(directory)
    problem = stamp_problem(d)
    if problem is not None:
        raise (FileNotFoundError if problem.startswith("no compiled") else ValueError)(problem)
    stamp = read_stamp(d)
    path = module_path(d)
    spec = importlib.util.spec_from_file_location(MODULE, path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise ValueError(f"{path}: cannot be imported ({exc})") from exc
    missing = [e for e in stamp["exports"] if not callable(getattr(module, e, None))]
    if missing:
        raise ValueError(f"{path}: lacks the stamp's {', '.join(missing)}")
    try:
        return CompiledKernels(module, stamp, d)
    except (KeyError, TypeError, AttributeError) as exc:  # stamp_problem checked the table; belt and braces
        raise ValueError(f"{d / STAMP_FILE}: unusable export table ({exc})") from exc


# -- build -------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _gil_releasing_wrappers():
    """numba.pycc compiles its exports with default ``Flags``; for this build they release the GIL."""
    import numba.pycc.compiler as pycc_compiler

    base = pycc_compiler.Flags

    class Flags(base):
        def __init__(self, *args):
            super().__init__(*args)
            self.release_gil = True

    pycc_compiler.Flags = Flags
    try:
        yield
    finally:
        pycc_compiler.Flags = base


def _check_in_child(directory: Path) -> None:
    import subprocess

    code = f"from core._search_aot_check import self_test; self_test({str(directory)!r})"
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    except subprocess.TimeoutExpired as exc:
        raise KernelBuildError("the new kernels' self test did not finish in 600 s; not installed") from exc
    if res.returncode != 0:  # an exception or a crash (a negative status: the signal)
        last = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise KernelBuildError(f"the new kernels failed their self test ({last}); not installed")


def _replace(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        os.fsync(f.fileno())
    os.replace(src, dst)


def build(directory: str | os.PathLike, *, only_if_stale: bool = False) -> tuple[dict, bool]:
    """Compile the walk-search kernels into ``directory`` (created); returns ``(stamp, built)``.

    Takes 5-30 s (LLVM at -O3 and the C compiler). Builds into one folder take turns (a lock file,
    ``.build.lock``); with ``only_if_stale`` a current build found once the lock is held is kept
    (``built`` False). Raises :class:`KernelBuildError` when numba, the C compiler or the Python headers
    are missing, compilation fails or the folder cannot be written; files already in ``directory`` are
    then left as they were.
    """
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KernelBuildError(f"{d}: cannot create the kernels folder ({exc.strerror})") from exc
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numba.pycc's pending-deprecation notice
            from numba.pycc import CC
        from core import _search_kernels as jit
    except ImportError as exc:
        raise KernelBuildError(f"numba is needed to build the kernels: {exc}") from exc
    try:
        lock = open(d / ".build.lock", "a")  # noqa: SIM115 - held for the whole build
    except OSError as exc:
        raise KernelBuildError(f"{d}: cannot write there ({exc.strerror or exc})") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per folder; the next one waits
        if only_if_stale and stamp_problem(d) is None:
            return read_stamp(d), False  # another build made them current while this one waited
        for stale in d.glob(".build-*"):  # left by a build that was killed (power cut)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            return _build_locked(d, CC, jit), True
        except OSError as exc:
            raise KernelBuildError(f"{d}: cannot write the kernels there ({exc.strerror or exc})") from exc


def sweep_stale(directory: str | os.PathLike) -> int:
    """Remove the ``.build-*`` folders of killed builds in ``directory`` unless a build holds the lock now;
    returns how many were removed."""
    d = Path(directory)
    try:
        lock = open(d / ".build.lock", "a")  # noqa: SIM115 - held while sweeping
    except OSError:
        return 0
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a build is running: its folder is not stale
            return 0
        stale = list(d.glob(".build-*"))
        for p in stale:
            shutil.rmtree(p, ignore_errors=True)
        return len(stale)


def _build_locked(d: Path, CC, jit) -> dict:  # noqa: N803 - numba's class
    versions = _versions()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".build-", dir=d) as tmp:
        try:
            cc = CC(MODULE)  # looks for the C compiler
        except Exception as exc:  # noqa: BLE001 - numba raises RuntimeError; say what is missing
            raise KernelBuildError(f"no C compiler found ({exc.__class__.__name__}: {str(exc).splitlines()[0]}); "
                                   "a C compiler (gcc) and the Python headers (python3-dev) are needed") from exc
        cc.output_dir = tmp
        cc.target_cpu = "host"
        exports = {}
        for kernel in KERNELS:
            dispatcher = getattr(jit, kernel)
            if not hasattr(dispatcher, "nopython_signatures"):
                raise KernelBuildError("numba's JIT is off in this environment (NUMBA_DISABLE_JIT): the kernels "
                                       "cannot be compiled")
            for i, sig in enumerate(dispatcher.nopython_signatures):
                export = f"{kernel}__{i}"
                cc.export(export, sig)(dispatcher.py_func)
                exports[export] = {"kernel": kernel, "args": [_type_spec(t) for t in sig.args],
                                   "returns": str(sig.return_type)}
        try:
            with _gil_releasing_wrappers():
                cc.compile()
        except Exception as exc:  # noqa: BLE001 - distutils / LLVM raise many types; the message says what
            raise KernelBuildError(f"compiling the kernels failed ({type(exc).__name__}: {exc}); a C compiler "
                                   "(gcc) and the Python headers (python3-dev) are needed") from exc
        built = module_path(tmp)
        if not built.is_file():
            raise KernelBuildError(f"the compiler wrote no {built.name} in {tmp}")
        if b"PyEval_SaveThread" not in built.read_bytes():
            raise KernelBuildError("the compiled kernels would hold the GIL during a search (numba.pycc changed?)")
        stamp = {"format": STAMP_FORMAT, **versions, "file": built.name,
                 "content_sha256": _content_sha256(built.read_bytes(), exports), "target_cpu": "host",
                 "built_unix_s": round(time.time(), 3), "build_s": round(time.monotonic() - t0, 2), "exports": exports}
        tmp_stamp = Path(tmp) / STAMP_FILE
        tmp_stamp.write_text(json.dumps(stamp, indent=1) + "\n")
        _check_in_child(Path(tmp))
        _replace(built, module_path(d))
        _replace(tmp_stamp, d / STAMP_FILE)
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return stamp
