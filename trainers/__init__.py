"""The Accelerate trainer and the ``rubricgym`` command line.

Importing this package is cheap: torch, transformers and the engines are imported only by
the modules that need them.
"""
