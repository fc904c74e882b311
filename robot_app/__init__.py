"""The onboard process: config, CLI, service supervisor, jobs, mission executive, UI."""

__version__ = "0.1.0"
