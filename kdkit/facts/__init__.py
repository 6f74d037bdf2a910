"""Facts about other software and hardware, read from kdkit/data with their sources: the torch
builds and their driver floors (pairings), the GPU offers people rent (catalog), and which CPU a
lock or image was made for against a card's hosts (platforms)."""
