"""Wrong app in a torchrun group's first start only: hangs forever on the ID named by HANG_ON while
TORCHELASTIC_RESTART_COUNT is 0 (the test kills it; torchrun's restart then answers everything)."""

import os
import time

from src.oracle import predict as correct


def predict(items):
    first_start = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
    if first_start and any(item["id"] == os.environ.get("HANG_ON") for item in items):
        while True:
            time.sleep(1)
    return correct(items)
