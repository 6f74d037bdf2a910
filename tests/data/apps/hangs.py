"""Wrong app: hangs forever on the ID named by HANG_ON (the test kills it with SIGKILL)."""

import os
import time

from src.oracle import predict as correct


def predict(items):
    if any(item["id"] == os.environ.get("HANG_ON") for item in items):
        while True:
            time.sleep(1)
    return correct(items)
