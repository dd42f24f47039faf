"""`python -m tessera ...`: the command line without the console script (as the operator's e2e tests run it)."""

from tessera.cli import main

main()
