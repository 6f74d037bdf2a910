"""``python -m kdkit.probe COMMAND``: the in-container commands without click."""

import sys

from kdkit.core.commands import main

sys.exit(main())
