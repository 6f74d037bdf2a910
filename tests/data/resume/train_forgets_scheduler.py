"""A broken loop for tests: its checkpoint leaves the LR scheduler out, so a resume restarts it."""

import sys

import src.train as loop

_checkpoint_state = loop.checkpoint_state
_restore = loop.restore


def checkpoint_state(state):
    saved = _checkpoint_state(state)
    del saved["scheduler"]
    return saved


def restore(state, saved):
    _restore(state, {**saved, "scheduler": state.scheduler.state_dict()})


loop.checkpoint_state = checkpoint_state
loop.restore = restore

if __name__ == "__main__":
    sys.exit(loop.main())
