"""The demo's stages, their titles, the failure a stage raises and the refusal of bad input: the leaf every
demo module imports (:mod:`robot_app.demo.runner` runs the stages in this order)."""

from __future__ import annotations

STAGES = ("explore", "map", "plan", "drive", "task", "report")
TITLES = {"explore": "scripted exploration, recording", "map": "building the map (VNM edges, VLM embeddings)",
          "plan": "instruction -> landmarks -> grounding -> walk",
          "drive": "the onboard app drives the walk (operator: plan, go)",
          "task": "LASP task job with a closed gate", "report": "writing the report"}


class DemoInputError(ValueError):
    """The demo's input cannot be used (unknown world, an instruction naming what the world lacks, a world
    without a start that has a GPS fix); raised before any stage runs (the command exits 2)."""


class StageFailed(RuntimeError):
    """A stage could not do its job; ``detail`` is what it measured up to the failure (for the report)."""

    def __init__(self, reason: str, detail: dict | None = None):
        super().__init__(reason)
        self.detail = detail or {}
