"""`sweep` and `resume-test`: measurements of the user's code before the long run (batch sizes by
length group; a training loop that resumes exactly in a new process, alone or under torchrun:
launch.py)."""
