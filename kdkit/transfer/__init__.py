"""Carrying a project to the rented machine: `kdkit bundle` (one verified folder: image, project,
kdkit.pyz, RUN.md, SHA256SUMS), `kdkit verify-bundle` and `kdkit load`, and the zipapp itself."""
