import sys

from kpd_cli.main import main

sys.exit(main())
