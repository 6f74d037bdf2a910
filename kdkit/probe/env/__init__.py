"""`verify-env` and `torch-arch`: the live environment of an interpreter against its lock, and the
GPU architectures its torch was compiled for."""
