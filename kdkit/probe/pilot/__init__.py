"""`pilot` and `gather`: the user's code run over the pilot inputs under a supervisor, each ID
answered exactly once, the run folder sealed by a verified summary; the workers' shares, taken from
a launcher's variables where one started the pilot, and gathered from wherever they were copied;
`manifest`: the manifest of a folder of inputs or a JSONL corpus."""
