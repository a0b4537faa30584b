"""Developer tools kept out of the runtime packages (not in the wheel)."""
