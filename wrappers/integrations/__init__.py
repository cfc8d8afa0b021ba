"""Adapters that plug rubricgym's environments and credit estimators into RL libraries.

One module per library, each importing its library lazily and installed with its own extra;
importing :mod:`wrappers` or this package imports no RL library.
"""
