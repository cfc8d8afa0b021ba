"""Evaluating agents on fixed panels (``rubricgym eval``): :mod:`.agents` builds the agent of a
model spec, :mod:`.tools` offers the actions as function-calling tools, :mod:`.runner` plays,
traces and summarises the panel."""
