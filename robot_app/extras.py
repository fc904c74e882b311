"""The optional extras of ``pyproject.toml`` and the one check that a command has the one it needs.

The robot runs without any of them. Modules that wrap an extra import it where it is used (the models'
exporters, the simulated world's renderer, the RECON importer, the llama.cpp worker); the command line
calls :func:`require` first, so a missing extra is one line that says what to install, not a traceback.
"""

from __future__ import annotations

import importlib

from robot_app.errors import UsageError

#: extra name -> the modules it provides (pyproject.toml [project.optional-dependencies])
EXTRAS: dict[str, tuple[str, ...]] = {
    "sim": ("pybullet",),
    "export": ("torch", "open_clip", "onnx"),
    "recon": ("h5py",),
    "llm": ("llama_cpp",),
    # ROS 2: bag import (rosbags) and the ros2 backend's DDS link (cyclonedds)
    "ros2": ("rosbags", "cyclonedds"),
    "fleet": ("ray",),
}


def require(*extras: str, what: str) -> None:
    """Check that ``extras`` are installed before ``what`` (a command, e.g. "eval sim") starts.

    Raises
    ------
    UsageError
        Naming ``what``, the missing module and the ``pip install 'robot-app[...]'`` that provides it.
    KeyError
        An extra that pyproject.toml does not define (a bug in the caller).
    """
    for extra in extras:
        for module in EXTRAS[extra]:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise UsageError(f"{what} needs {module} (the {extra} extra): pip install "
                                 f"'robot-app[{','.join(extras)}]'") from exc
