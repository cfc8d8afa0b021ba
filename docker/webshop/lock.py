"""Write docker/webshop/requirements.txt: the WebShop server image's dependencies, pinned.

The recipe is every image's (``docker/lock.py``): pip resolves ``.[webshop]`` and the lock keeps
the ``webshop`` extra and the core dependencies the server imports, with everything they require,
each at the exact version pip chose; the core dependencies the server never imports (the plotting
stack, scipy, the trainer's config libraries) stay out, and so does everything only they pull in.

Run it with the image's Python (3.11) on Linux, from anywhere, whenever ``pyproject.toml``'s
``dependencies`` or ``webshop`` extra change (``tests/test_webshop_server.py`` checks that the
lock still satisfies them)::

    python docker/webshop/lock.py            # rewrite the lock
    python docker/webshop/lock.py --check    # exit 1 if it would change
"""

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "lock.py"), run_name="docker_lock")["main"]("webshop")
