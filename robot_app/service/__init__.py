"""The onboard process: supervised components in one asyncio loop, systemd integration."""
