"""``python -m durable_adk.chaos``: the chaos soak (docs/testing.md, "Chaos soak")."""

import sys

from durable_adk.chaos.soak import main

sys.exit(main())
