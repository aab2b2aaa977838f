"""Allow `python -m tilex ...`."""
from tilex.cli import main

main()
