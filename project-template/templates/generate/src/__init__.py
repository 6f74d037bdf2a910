"""The project's application code; the pilot imports ``src.generate:predict`` (config/pilot.json)."""
