"""``python -m signclust`` = the ``signclust`` command."""
from signclust.cli import main

raise SystemExit(main())
