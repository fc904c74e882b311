import sys

from robot_app.cli import main

sys.exit(main())
