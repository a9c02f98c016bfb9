#!/usr/bin/env python
"""Django's command-line utility for dir2mcp."""

import sys

from dir2mcp_site.cli import main

if __name__ == "__main__":
    main(sys.argv)
