"""``python -m kdkit.probe COMMAND``: the in-container commands without click."""

import sys

from kdkit.probe.entry import main

sys.exit(main())
