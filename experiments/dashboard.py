"""The dashboard's command (the dashboard itself: `dashboard/`):

    python -m experiments.dashboard --run_dir=runs/x [--port=8050] [--host=127.0.0.1]
    python -m experiments.dashboard --run_dir=runs/x --export=report.html   # one file, offline
"""

import sys

from dashboard.server import main
from experiments.watch import watch

if __name__ == "__main__":
    sys.exit(main(watch=watch))   # a payoff cell's game, watched (dashboard/watch.py)
