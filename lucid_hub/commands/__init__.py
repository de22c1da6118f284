"""Commands that open a hub's parts themselves, beside the CLI that calls them: a delivery
worker process, publishing a file (into the data directory, or to a running hub), and the
Spark bulk publish launcher."""
