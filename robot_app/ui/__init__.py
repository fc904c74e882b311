"""Touchscreen web UI: an aiohttp server in the onboard process, static assets in the package."""
