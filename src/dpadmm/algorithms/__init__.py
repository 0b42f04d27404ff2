"""One module per paper: frozen configs, NamedTuple states, pure per-party step functions."""
