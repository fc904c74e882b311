"""Landmark text: the offline rule-based parser and LM-Nav's extraction-success metric.

Pure string processing (no models, no I/O), so it runs on the robot with nothing installed.
"""

from core.landmarks.metrics import extraction_success, lcs_length, normalize_landmark
from core.landmarks.parser import MAX_INSTRUCTION_CHARS, parse_landmarks

__all__ = ["MAX_INSTRUCTION_CHARS", "extraction_success", "lcs_length", "normalize_landmark",
           "parse_landmarks"]
