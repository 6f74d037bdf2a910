"""``python -m kdkit.probe COMMAND``: the in-container commands without click."""

import sys

from kdkit.probe.commands import main

sys.exit(main())
