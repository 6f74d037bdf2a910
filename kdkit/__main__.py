"""``python -m kdkit``."""

from kdkit.cli import main

main()
