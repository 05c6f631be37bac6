"""The ``rebalancer`` command line: a thin dispatcher into the packages."""
