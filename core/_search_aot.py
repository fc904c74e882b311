"""The walk-search kernels compiled ahead of time: the same numba code, loaded without numba or LLVM.

Importing numba and loading the JIT kernels of :mod:`core._search_kernels` from numba's on-disk cache adds
about 130 MB to a process (numba, llvmlite and LLVM's code and data) and 0.4-1 s to its start. The robot
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
  ``core/_search_kernels.py``, the numba, numpy and Python versions, the CPU and the module file's own
  sha256; :func:`load` refuses the module when any differs (the caller then uses the JIT kernels). Files are
  written to temporary names, fsynced and renamed, the module before the stamp: a power cut leaves the
  old pair or a stamp whose file sha256 no longer matches, both refused.
"""

from __future__ import annotations

import contextlib
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
    return {"source_sha256": _sha256(_SOURCE), "numba": numba_version, "numpy": np.__version__,
            "python": sys.implementation.cache_tag, "machine": platform.machine(), "cpu": _cpu_id()}


def module_path(directory: str | os.PathLike) -> Path:
    """Where :func:`build` writes the extension module in ``directory`` (this Python's suffix)."""
    return Path(directory) / (MODULE + importlib.machinery.EXTENSION_SUFFIXES[0])


def stamp_problem(directory: str | os.PathLike) -> str | None:
    """Why the compiled kernels in ``directory`` cannot be used here, or None when they can."""
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
                      ("numba", "numba version"), ("numpy", "numpy version"), ("python", "Python version"),
                      ("machine", "CPU architecture"), ("cpu", "CPU model or features")):
        if stamp.get(key) != now[key]:
            if key == "source_sha256":
                return f"stale: {what} since the build"
            return f"stale: {what} {stamp.get(key)} at the build, {now[key]} now"
    path = d / stamp.get("file", "")
    if not path.is_file():
        return f"{path}: missing"
    if _sha256(path) != stamp.get("file_sha256"):
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
    path = d / stamp["file"]
    spec = importlib.util.spec_from_file_location(MODULE, path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise ValueError(f"{path}: cannot be imported ({exc})") from exc
    return CompiledKernels(module, stamp, d)


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


def _replace(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        os.fsync(f.fileno())
    os.replace(src, dst)


def build(directory: str | os.PathLike) -> dict:
    """Compile the walk-search kernels into ``directory`` (created) and return the stamp written there.

    Takes 5-30 s (LLVM at -O3 and the C compiler). Raises :class:`KernelBuildError` when numba, the C
    compiler or the Python headers are missing or compilation fails; files already in ``directory`` are
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
    for stale in d.glob(".build-*"):  # left by a build that was killed (power cut)
        shutil.rmtree(stale, ignore_errors=True)
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
        stamp = {"format": STAMP_FORMAT, **versions, "file": built.name, "file_sha256": _sha256(built),
                 "target_cpu": "host", "built_unix_s": round(time.time(), 3),
                 "build_s": round(time.monotonic() - t0, 2), "exports": exports}
        tmp_stamp = Path(tmp) / STAMP_FILE
        tmp_stamp.write_text(json.dumps(stamp, indent=1) + "\n")
        _replace(built, module_path(d))
        _replace(tmp_stamp, d / STAMP_FILE)
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return stamp
