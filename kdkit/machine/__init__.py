"""`kdkit run` on the rented machine: the image with the right device access, confined, its verdict
as the exit code; with --workers, one container per GPU over separate shares, then one gathering."""
