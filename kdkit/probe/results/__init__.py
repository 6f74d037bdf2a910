"""`copy-out`: a run folder copied elsewhere and verified file by file before it is called
copied."""
