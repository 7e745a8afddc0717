"""`python -m flatshare.cli`."""

from flatshare.cli import main

main()
