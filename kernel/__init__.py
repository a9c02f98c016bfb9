"""The shared kernel: what every app of the project may use and which uses none of them."""
