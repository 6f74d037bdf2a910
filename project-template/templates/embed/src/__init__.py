"""The project's application code; the pilot imports ``src.embed:predict`` (config/pilot.json)."""
