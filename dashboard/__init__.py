"""The league dashboard: a web page of a run's league.db (`dashboard/server.py`, the page's files
in `dashboard/static/`), served while a league runs (`serve`) or by its command,
`python -m experiments.dashboard --run_dir=DIR` (`experiments/dashboard.py`)."""
