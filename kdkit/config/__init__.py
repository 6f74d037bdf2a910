"""A project as the host reads it: its checked configuration (kdkit.json and the backends), the
schemas every document is held to, the files kdkit ships (schemas, template, Dockerfiles, data), and
the files a project is made of (what travels: the allow-list, the walk, the committed entries)."""
