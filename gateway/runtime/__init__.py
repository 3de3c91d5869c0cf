"""The runtime: assembling a replica (``intake`` wires intake's chain), the daemon process around
it, the supervisor of workers, the command line and the hints ``check`` prints."""
