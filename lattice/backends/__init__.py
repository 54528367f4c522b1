"""Backend implementation layer (Python side): one function per (backend, algorithm)
route, thin wrappers over the native core. Only ops, after their route function has
decided, call into here.
"""
