"""The benchmark (bench/run): the real ingest endpoint against a bare Django floor."""
