"""kdkit: check a GPU project before renting the machine, and prove it on the machine received.

This module stays import-free: the in-container side (``kdkit.probe``) is loaded
from it in environments that may hold nothing but the standard library.
"""

__version__ = "0.1.0"
