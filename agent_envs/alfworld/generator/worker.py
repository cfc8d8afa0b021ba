"""Worker entry point: ``python -m agent_envs.alfworld.generator.worker '<json spec>'``.

Builds, verifies and writes the games of one chunk (see :func:`.cache._run_workers`): each game
file, then its manifest entry as ``<root>/.partial/<index>.json`` (the parent counts them for its
progress report), and finally all the entries as JSON on stdout. Not a user command:
:class:`.cache.GameSet` runs it.
"""

from __future__ import annotations

import json
import logging
import sys

from agent_envs.alfworld.generator.cache import _generate_chunk


def main(argv: list[str] | None = None) -> int:
    """Run one chunk described by the JSON spec ``{"root", "seed", "jobs": [[index, type]...]}``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m agent_envs.alfworld.generator.worker '<json spec>'\n")
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # this process is ours
    from agent_envs.alfworld import fast_grammar

    fast_grammar.enable()  # identical outputs, 2-3x faster replays
    spec = json.loads(args[0])
    jobs = [(int(index), str(task_type)) for index, task_type in spec["jobs"]]
    entries = _generate_chunk(spec["root"], int(spec["seed"]), jobs)
    sys.stdout.write(json.dumps(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
