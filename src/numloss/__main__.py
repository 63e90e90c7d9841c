import sys

from numloss.cli import main

sys.exit(main())
