"""Before ordering and after the campaign: `kdkit check` (will the locked build run on this offer),
`kdkit plan` (cost and schedule), `kdkit estimate-memory`, and `kdkit close` (what the money
bought)."""
