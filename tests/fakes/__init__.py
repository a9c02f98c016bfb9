"""Local fake servers that speak the providers' real wire formats."""
