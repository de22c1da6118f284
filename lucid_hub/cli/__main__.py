"""`python -m lucid_hub.cli`: the `lucid-hub` command."""

import sys

from lucid_hub.cli import main

sys.exit(main())
