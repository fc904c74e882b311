"""The robot's runtime path (models + CLI) must not import torch or the exporters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUNTIME_MODULES = ["models.sidecar", "models.onnx_common", "models.clip", "models.clip_preprocess",
                   "models.text_embed", "models.vnm", "models.bench", "robot_app.cli.models_cmd"]


def test_runtime_path_imports_no_torch(clip_export_dir):
    code = (
        "import sys\n"
        f"for m in {RUNTIME_MODULES!r}: __import__(m)\n"
        "from models.clip import open_clip_model\n"
        f"c = open_clip_model({str(clip_export_dir)!r})\n"
        "import numpy as np\n"
        "c.encode_images([np.zeros((50, 60, 3), np.uint8)]); c.encode_landmarks(['a tree'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'open_clip', "
        "'transformers', 'sentence_transformers', 'onnx') or m.startswith('models.export'))\n"
        "assert not bad, bad\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
