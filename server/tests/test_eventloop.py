"""The serving process's runtime choices (`runtime/eventloop.py`) that need no server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVER_DIR = Path(__file__).resolve().parents[1]


def test_settle_leaves_what_start_up_built_out_of_the_collectors_passes():
    # in a process of its own: a freeze lasts for the process
    code = ("import gc\n"
            "from cvsm_server.runtime.app import create_app\n"
            "from cvsm_server.runtime import eventloop\n"
            "app = create_app()\n"
            "before = gc.get_freeze_count()\n"
            "eventloop.settle()\n"
            "print(before, gc.get_freeze_count(), len(gc.get_objects()))\n")
    env = {"PYTHONPATH": str(SERVER_DIR), "CVSM_MASTER_KEY": "A" * 43 + "=",
           "CVSM_JWT_SECRET": "B" * 43 + "=", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    before, frozen, tracked = map(int, out.stdout.split())
    assert before == 0
    assert frozen > 10_000  # the modules, routes, templates and catalogs of the app
    assert tracked < 1_000  # what the collector still walks
