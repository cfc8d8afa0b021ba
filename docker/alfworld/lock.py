"""Write docker/alfworld/requirements.txt: the ALFWorld server image's dependencies, pinned.

The recipe is every image's (``docker/lock.py``): pip resolves ``.[alfworld,openenv]`` and the
lock keeps the ``alfworld`` and ``openenv`` extras and the core dependencies the server imports,
with everything they require, each at the version pip chose; the core dependencies the server
never imports (the plotting stack, scipy, the trainer's config libraries) stay out, unless an
extra needs them too.

Run it with the image's Python (3.11) on Linux whenever ``pyproject.toml``'s ``dependencies``
or the ``alfworld``/``openenv`` extras change::

    python docker/alfworld/lock.py            # rewrite the lock
    python docker/alfworld/lock.py --check    # exit 1 if it would change
"""

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "lock.py"), run_name="docker_lock")["main"]("alfworld")
