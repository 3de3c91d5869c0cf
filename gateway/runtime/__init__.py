"""The runtime: assembling a replica, the daemon process around it, the supervisor of workers, and
the command line."""
