"""An app that takes SLOW_SECONDS per batch (for the max_seconds stop rule and Ctrl-C)."""

import os
import time

from src.oracle import predict as correct


def predict(items):
    time.sleep(float(os.environ.get("SLOW_SECONDS", "0.5")))
    return correct(items)
