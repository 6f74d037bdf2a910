"""The project's application code; the pilot imports ``src.classify:predict`` (config/pilot.json)."""
