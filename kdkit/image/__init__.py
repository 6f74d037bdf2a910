"""`kdkit build` and `kdkit inspect`: the project's image made from its lock, the requirements lock
or the PEP 751 lock beside it (the build context, the build), and what an image says of itself (its
labels, the torch architectures, the lock it matches)."""
