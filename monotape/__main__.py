import sys

from monotape.cli import main

sys.exit(main())
