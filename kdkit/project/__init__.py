"""The project commands: `kdkit init` (the template copied into a new folder, all or nothing) and
`kdkit validate` (every config against its schema, then the portability rules)."""
