"""`diagnose`: prove, step by step, that this machine's GPU computes (driver, runtime, memory,
a known answer, the card's nominal figures), and say why not."""
